//! Process names, registration with every endpoint, and lookups.

use super::*;

/// A process name: (application id, process id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Name {
    /// Application id (AI).
    pub ai: i32,
    /// Process id within the application (PI), `0..group_size`.
    pub pi: i32,
}

impl Name {
    /// `(ai, pi)`.
    pub const fn new(ai: i32, pi: i32) -> Self {
        Name { ai, pi }
    }
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    /// `qx_init`: registers as `name` of application `group_name` (which must be
    /// `name.ai`) of `group_size` processes and waits until all have registered.
    pub fn init(&mut self, name: Name, group_name: i32, group_size: i32) -> Result<(), QxError> {
        self.register(name, group_name, group_size)?;
        let deadline = self.ep.clock.now() + self.init_timeout;
        loop {
            if self.registered()? {
                return Ok(());
            }
            if self.ep.clock.now() >= deadline {
                return Err(QxError::TimedOut);
            }
        }
    }

    /// The first half of [`Qnix::init`]: tells every endpoint this process's name.
    pub fn register(
        &mut self,
        name: Name,
        group_name: i32,
        group_size: i32,
    ) -> Result<(), QxError> {
        if self.app_size != 0 || self.ended {
            return Err(QxError::Exists);
        }
        if group_name != name.ai || group_size < 1 || name.pi < 0 || name.pi >= group_size {
            return Err(QxError::Invalid);
        }
        if group_size as usize > self.names.len() {
            return Err(QxError::Size);
        }
        let me = self.ep.engine.config().node;
        if self
            .names
            .iter()
            .any(|n| matches!(n, Some((n, _)) if *n == name))
        {
            return Err(QxError::Exists);
        }
        self.me = name;
        self.app_size = group_size;
        self.names[me as usize] = Some((name, group_size));
        let others: Vec<NodeId> = (0..self.names.len() as NodeId)
            .filter(|&n| n != me)
            .collect();
        self.tx.push_back(TxJob::control(
            others,
            head(K_REG, name.ai, name.pi, group_size as u32),
        ));
        self.step();
        Ok(())
    }

    /// The second half of [`Qnix::init`]: whether the whole application has
    /// registered (one step first).
    pub fn registered(&mut self) -> Result<bool, QxError> {
        if self.registered {
            return Ok(true);
        }
        if self.app_size == 0 {
            return Err(QxError::NotInitialized);
        }
        let busy = self.step();
        if self.conflict {
            return Err(QxError::Exists);
        }
        let mut seen = alloc::vec![false; self.app_size as usize];
        let mut count = 0;
        for (name, size) in self.names.iter().flatten().copied() {
            if name.ai != self.me.ai {
                continue;
            }
            if size != self.app_size {
                return Err(QxError::Size);
            }
            let Some(s) = seen.get_mut(name.pi as usize) else {
                return Err(QxError::Size);
            };
            if !*s {
                *s = true;
                count += 1;
            }
        }
        if count == self.app_size {
            let mut app = GroupState {
                name: self.me.ai,
                size: Some(self.app_size),
                ..GroupState::default()
            };
            for (n, v) in self.names.iter().enumerate() {
                if let Some((name, _)) = v.filter(|(name, _)| name.ai == self.me.ai) {
                    app.members.push((name.pi, n as NodeId));
                }
            }
            app.members.sort_unstable();
            match self.groups.iter_mut().find(|g| g.name == self.me.ai) {
                Some(g) => {
                    app.tokens = core::mem::take(&mut g.tokens);
                    *g = app;
                }
                None => self.groups.push(app),
            }
            self.registered = true;
            return Ok(true);
        }
        if self.dead.iter().any(|&d| d) {
            return Err(QxError::Dead);
        }
        self.idle_step(busy);
        Ok(false)
    }

    pub(super) fn ready(&self) -> Result<(), QxError> {
        if self.registered && !self.ended {
            Ok(())
        } else {
            Err(QxError::NotInitialized)
        }
    }

    /// `qx_end`: finishes what was posted (at most 10 s) and de-registers.
    pub fn end(&mut self) -> Result<(), QxError> {
        self.ready()?;
        let deadline = self.ep.clock.now() + Duration::from_secs(10);
        self.ep.engine.flush_acks();
        loop {
            let busy = self.step();
            let idle = self.queue.is_empty()
                && self.tx.is_empty()
                && self.rndv.is_empty()
                && self.ep.engine.is_quiescent();
            if idle || self.ep.clock.now() >= deadline {
                break;
            }
            self.idle_step(busy);
        }
        self.ended = true;
        Ok(())
    }

    // ------------------------------------------------------------ names

    /// This process's name.
    pub fn name(&self) -> Name {
        self.me
    }

    /// Processes in this process's application.
    pub fn app_size(&self) -> i32 {
        self.app_size
    }

    /// The endpoint of a registered process of this application.
    pub fn lookup(&self, name: Name) -> Result<NodeId, QxError> {
        if name.ai != self.me.ai {
            // Out of reach if another application registered it; a name nobody
            // registered is unknown, whatever its application id.
            let known = self.names.iter().flatten().any(|(n, _)| *n == name);
            return Err(if known {
                QxError::OtherApplication
            } else {
                QxError::Unknown
            });
        }
        self.names
            .iter()
            .position(|n| matches!(n, Some((n, _)) if *n == name))
            .map(|n| n as NodeId)
            .ok_or(QxError::Unknown)
    }

    pub(super) fn name_of(&self, node: NodeId) -> Option<Name> {
        self.names
            .get(node as usize)
            .copied()
            .flatten()
            .map(|(n, _)| n)
    }
}
