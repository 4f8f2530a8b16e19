//! A client of the PMI-1 wire protocol that MPICH's Hydra (`mpiexec`) speaks to its
//! ranks over the socket in `PMI_FD`: enough to share one value through the job's
//! key-value space (`put` by one rank, a barrier, `get` by the others). Volley uses it
//! to hand every rank the job secret without writing it anywhere another user could
//! read it.
//!
//! Lines are `cmd=NAME key=value ...\n`; see MPICH's `src/pmi/simple`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::HostError;

/// A connection to the process manager.
#[derive(Debug)]
pub struct Pmi {
    out: UnixStream,
    inp: BufReader<UnixStream>,
    kvs: String,
}

fn err(msg: impl Into<String>) -> HostError {
    HostError::Bootstrap(format!("PMI (mpiexec): {}", msg.into()))
}

/// The value of `key=` in a response line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

impl Pmi {
    /// Connects through `PMI_FD`, if the process manager set it and answers PMI-1's
    /// `init` within a few seconds. A manager that speaks another protocol on that
    /// socket (Slurm's PMI-2) gets `None`, and its descriptor is left open; every rank
    /// of a job decides the same way.
    pub fn from_env() -> Result<Option<Pmi>, HostError> {
        let Ok(v) = std::env::var("PMI_FD") else {
            return Ok(None);
        };
        let fd: i32 = v
            .trim()
            .parse()
            .map_err(|_| err(format!("PMI_FD={v:?} is not a descriptor")))?;
        // SAFETY: F_GETFD only asks whether `fd` is open; no memory is touched.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(err(format!("PMI_FD={fd} is not open")));
        }
        // SAFETY: the process manager handed us this socket for our exclusive use;
        // nothing else in the process owns it.
        let sock = unsafe { UnixStream::from_raw_fd(fd) };
        sock.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| err(e.to_string()))?;
        let inp = BufReader::new(sock.try_clone().map_err(|e| err(e.to_string()))?);
        let mut p = Pmi {
            out: sock,
            inp,
            kvs: String::new(),
        };
        let ok = p
            .call(
                "cmd=init pmi_version=1 pmi_subversion=1",
                "response_to_init",
            )
            .is_ok_and(|r| field(&r, "rc") == Some("0"));
        if !ok {
            // Not PMI-1: the descriptor goes back to its owner unclosed (the reader
            // holds a duplicate, which may close).
            let Pmi { out, .. } = p;
            let _ = std::os::fd::IntoRawFd::into_raw_fd(out);
            return Ok(None);
        }
        p.out
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| err(e.to_string()))?;
        let r = p.call("cmd=get_my_kvsname", "my_kvsname")?;
        p.kvs = field(&r, "kvsname")
            .ok_or_else(|| err(format!("no kvsname in {r:?}")))?
            .to_owned();
        Ok(Some(p))
    }

    fn call(&mut self, line: &str, expect: &str) -> Result<String, HostError> {
        writeln!(self.out, "{line}").map_err(|e| err(e.to_string()))?;
        let mut r = String::new();
        let n = self.inp.read_line(&mut r).map_err(|e| err(e.to_string()))?;
        if n == 0 {
            return Err(err("the process manager closed the connection"));
        }
        if field(&r, "cmd") != Some(expect) {
            return Err(err(format!("expected {expect}, got {:?}", r.trim())));
        }
        Ok(r)
    }

    /// Stores `key=value` in the job's key-value space.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), HostError> {
        let kvs = self.kvs.clone();
        let r = self.call(
            &format!("cmd=put kvsname={kvs} key={key} value={value}"),
            "put_result",
        )?;
        match field(&r, "rc") {
            Some("0") => Ok(()),
            _ => Err(err(format!("put {key} refused: {}", r.trim()))),
        }
    }

    /// Waits until every rank has reached its barrier (puts before it are visible after).
    pub fn barrier(&mut self) -> Result<(), HostError> {
        self.call("cmd=barrier_in", "barrier_out").map(|_| ())
    }

    /// Reads `key` from the job's key-value space.
    pub fn get(&mut self, key: &str) -> Result<String, HostError> {
        let kvs = self.kvs.clone();
        let r = self.call(&format!("cmd=get kvsname={kvs} key={key}"), "get_result")?;
        match (field(&r, "rc"), field(&r, "value")) {
            (Some("0"), Some(v)) => Ok(v.to_owned()),
            _ => Err(err(format!("get {key}: {}", r.trim()))),
        }
    }

    /// Tells the process manager this rank is done with PMI.
    pub fn finalize(mut self) -> Result<(), HostError> {
        self.call("cmd=finalize", "finalize_ack").map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn fields_are_found_by_name() {
        let r = "cmd=get_result rc=0 msg=success value=00ff\n";
        assert_eq!(field(r, "cmd"), Some("get_result"));
        assert_eq!(field(r, "value"), Some("00ff"));
        assert_eq!(field(r, "val"), None);
        assert_eq!(field(r, "kvsname"), None);
    }
}
