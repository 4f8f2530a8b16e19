//! QEMU's firmware configuration device (fw_cfg), legacy I/O interface: selector
//! port 0x510, data port 0x511 (QEMU `docs/specs/fw_cfg.rst`). The host hands the
//! node files through it (`-fw_cfg name=opt/volley/key,file=...`): secrets that must
//! not appear on a command line, where `ps` shows them to every user.

use crate::port::{inb, outw};

const SELECTOR: u16 = 0x510;
const DATA: u16 = 0x511;
const SIGNATURE: u16 = 0x0000;
const FILE_DIR: u16 = 0x0019;

fn select(key: u16) {
    outw(SELECTOR, key);
}

fn read(out: &mut [u8]) {
    for b in out {
        *b = inb(DATA);
    }
}

/// Whether the device is there (it answers "QEMU" to the signature key).
pub fn present() -> bool {
    select(SIGNATURE);
    let mut sig = [0u8; 4];
    read(&mut sig);
    &sig == b"QEMU"
}

/// Reads file `name` into `out`; its length, or `None` if there is no such file.
pub fn file(name: &str, out: &mut [u8]) -> Option<usize> {
    if !present() {
        return None;
    }
    select(FILE_DIR);
    let mut count = [0u8; 4];
    read(&mut count);
    // Each entry: size (BE u32), selector (BE u16), reserved (u16), name (56 bytes).
    for _ in 0..u32::from_be_bytes(count).min(4096) {
        let mut e = [0u8; 64];
        read(&mut e);
        let size = u32::from_be_bytes([e[0], e[1], e[2], e[3]]) as usize;
        let key = u16::from_be_bytes([e[4], e[5]]);
        let raw = &e[8..];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        if &raw[..len] == name.as_bytes() {
            select(key);
            let n = size.min(out.len());
            read(&mut out[..n]);
            return Some(n);
        }
    }
    None
}
