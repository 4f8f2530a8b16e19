//! Frames an attacker forges, shared by the test binaries.

#![allow(dead_code)]

/// Frames an attacker who knows the job id (visible in `ps`) would forge: best-effort
/// and reliable data to rank 1's port 1 "from rank 0", with the job key derived the
/// way it used to be, valid CRCs, guessed sequence numbers and huge lengths.
pub fn forged_frames(job: u64) -> Vec<Vec<u8>> {
    use volley_core::wire::{Endpoints, Flags, Kind, Repr};
    let mut out = Vec::new();
    for k in 0..600u32 {
        let reliable = k % 2 == 1;
        let payload = [0xEEu8; 64];
        let repr = Repr {
            kind: Kind::Data,
            flags: if reliable {
                Flags::RELIABLE | Flags::LAST
            } else {
                Flags::LAST
            },
            job_key: (job ^ (job >> 32)) as u32,
            ends: Endpoints {
                src_group: 1,
                src_node: 0,
                src_port: 1,
                dst_group: 1,
                dst_node: 1,
                dst_port: 1,
            },
            seq: if reliable { k / 2 } else { 0 },
            ack: None,
            msg_id: k / 2,
            offset: 0,
            total_len: if k % 7 == 0 { u32::MAX } else { 64 },
            payload_len: 64,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit_with_payload(&mut buf, &[&payload], false)
            .unwrap();
        out.push(buf);
    }
    out
}
