//! The job secret: 128 random bits every rank of a job holds and no other user can
//! read. Frames on the network are authenticated under a key derived from it, and it
//! makes the job's shared-memory directory name unpredictable.
//!
//! Where a rank finds it, in this order:
//! - `VOLLEY_SECRET` (32 hex digits): set by `volley run` (and by `gamma_init` for the
//!   copies it starts) in the ranks' environment, which only their user can read
//!   (`/proc/<pid>/environ` is private); never on a command line;
//! - `VOLLEY_KEY_FILE`: a file of 32 hex digits that must be a regular file owned by
//!   this user with no group or other permissions (`chmod 600`): for jobs started by
//!   hand on several machines (`head -c16 /dev/urandom | xxd -p > key`, copied to each);
//! - PMI: under MPICH's `mpiexec`, rank 0 draws one and hands it to the others through
//!   the process manager's key-value space;
//! - none: the `shm` fabric still works (its directory is private and checked); the
//!   `udp` fabric refuses to start.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use crate::HostError;

/// The environment variable `volley run` passes the secret in.
pub const ENV: &str = "VOLLEY_SECRET";

/// A job secret. Its `Debug` output does not show it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret(pub [u8; 16]);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// 128 bits from the operating system's random source.
    pub fn generate() -> Result<Secret, HostError> {
        let mut b = [0u8; 16];
        getrandom::getrandom(&mut b).map_err(|e| {
            HostError::Bootstrap(format!("no random numbers for the job secret: {e}"))
        })?;
        Ok(Secret(b))
    }

    /// From 32 hex digits (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Option<Secret> {
        let t = text.trim();
        if t.len() != 32 || !t.is_ascii() {
            return None;
        }
        let mut b = [0u8; 16];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Secret(b))
    }

    /// As 32 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A value derived from the secret for one purpose (`what`), so that the key that
    /// authenticates frames, the job key and the directory name are unrelated.
    fn derive(&self, what: &[u8], job: u64) -> [u8; 16] {
        volley_core::wire::derive_key(&self.0, what, job)
    }

    /// The key frames are authenticated under.
    pub fn frame_key(&self, job: u64) -> [u8; 16] {
        volley_core::wire::frame_key(&self.0, job)
    }

    /// The 32-bit job key carried in every frame header.
    pub fn job_key(&self, job: u64) -> u32 {
        volley_core::wire::job_key(&self.0, job)
    }

    /// A name for the job's shared-memory directory nobody without the secret can
    /// predict.
    pub fn dir_tag(&self, job: u64) -> String {
        let d = self.derive(b"volley shm directory", job);
        d[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Reads a key file, refusing one that other users could read or replace.
fn from_file(path: &str) -> Result<Secret, HostError> {
    let bad = |why: String| HostError::Bootstrap(format!("VOLLEY_KEY_FILE={path:?}: {why}"));
    // O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; the
    // type check below refuses it. A regular file reads the same either way.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| bad(format!("cannot open ({e}; symbolic links are refused)")))?;
    let m = f.metadata().map_err(|e| bad(e.to_string()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.file_type().is_file() {
        return Err(bad("not a regular file".into()));
    }
    if m.uid() != me {
        return Err(bad(format!(
            "owned by uid {}, not by this user ({me})",
            m.uid()
        )));
    }
    if m.mode() & 0o077 != 0 {
        return Err(bad(format!(
            "mode {:o} lets other users read it: chmod 600",
            m.mode() & 0o777
        )));
    }
    let mut text = String::new();
    f.take(256)
        .read_to_string(&mut text)
        .map_err(|e| bad(e.to_string()))?;
    Secret::from_hex(&text).ok_or_else(|| bad("expected 32 hex digits".into()))
}

/// Finds this rank's job secret (see the module documentation). `rank` decides who
/// draws it under PMI.
pub fn load(rank: u16) -> Result<Option<Secret>, HostError> {
    if let Ok(v) = std::env::var(ENV) {
        return Secret::from_hex(&v)
            .map(Some)
            .ok_or_else(|| HostError::Bootstrap(format!("{ENV}: expected 32 hex digits")));
    }
    if let Ok(path) = std::env::var("VOLLEY_KEY_FILE") {
        return from_file(&path).map(Some);
    }
    let Some(mut pmi) = crate::pmi::Pmi::from_env()? else {
        return Ok(None);
    };
    const KEY: &str = "volley-secret";
    let secret = if rank == 0 {
        let s = Secret::generate()?;
        pmi.put(KEY, &s.to_hex())?;
        pmi.barrier()?;
        s
    } else {
        pmi.barrier()?;
        let v = pmi.get(KEY)?;
        Secret::from_hex(&v).ok_or_else(|| {
            HostError::Bootstrap("PMI (mpiexec): the job secret is garbled".into())
        })?
    };
    pmi.finalize()?;
    Ok(Some(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_garbage_is_refused() {
        let s = Secret::generate().unwrap();
        assert_eq!(Secret::from_hex(&s.to_hex()), Some(s));
        assert_eq!(Secret::from_hex(&format!(" {}\n", s.to_hex())), Some(s));
        for bad in [
            "",
            "00",
            &"g".repeat(32),
            &"0".repeat(33),
            "é".repeat(16).as_str(),
        ] {
            assert_eq!(Secret::from_hex(bad), None, "{bad:?}");
        }
        assert_eq!(format!("{s:?}"), "Secret(..)");
    }

    /// A key file that is a FIFO (or a directory, or a symbolic link) is refused
    /// at once with one line, never waited on; a private regular file is read.
    #[test]
    fn key_files_that_are_not_private_regular_files_are_refused_at_once() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = from_file(fifo.to_str().unwrap()).unwrap_err().to_string();
        assert!(t.elapsed() < std::time::Duration::from_secs(2), "{e}");
        assert!(e.contains("not a regular file") && !e.contains('\n'), "{e}");
        let e = from_file(dir.path().to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let key = dir.path().join("key");
        std::fs::write(&key, Secret([3; 16]).to_hex()).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(from_file(key.to_str().unwrap()).unwrap(), Secret([3; 16]));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        assert!(from_file(link.to_str().unwrap()).is_err());
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(from_file(key.to_str().unwrap())
            .unwrap_err()
            .to_string()
            .contains("chmod 600"));
    }

    #[test]
    fn derived_values_differ_by_purpose_and_job() {
        let s = Secret([7; 16]);
        assert_ne!(s.frame_key(1), s.frame_key(2));
        assert_ne!(s.frame_key(1)[..4], s.job_key(1).to_le_bytes());
        assert_ne!(s.dir_tag(1), s.dir_tag(2));
        assert_eq!(s.dir_tag(1).len(), 16);
    }
}
