use std::os::unix::fs::PermissionsExt;

/// The bench's rows are this user's alone, whatever the umask.
#[test]
fn the_bench_directory_and_rows_are_private() {
    let (dir, path) = super::private_rows_file().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir.path()), 0o700);
    assert_eq!(mode(&path), 0o600);
}
