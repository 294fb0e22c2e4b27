//! The program's process tree: every process started under `run`, found, signalled and
//! reaped, so that the lock is held until the last of them has exited.
//!
//! On Linux `quorum-lock` makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`) before
//! it starts the program. A process of the tree whose parent dies is then re-parented to
//! `quorum-lock` instead of init, so it stays in the tree after it leaves the program's
//! process group or session (`setsid`, a double fork). Every process of the tree is a
//! descendant of `quorum-lock`, found by walking `/proc`, and every one that becomes its
//! child is reaped by [`spawn_reaper`]. Elsewhere only the program and its process group
//! are known.

use std::collections::HashMap;
use std::process::ExitStatus;

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::sync::mpsc;

/// Where the program runs, and so where signals for it go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The program leads a process group of its own: signals go to the whole group, so a
    /// shell script's children get them too (as from a terminal).
    Group,
    /// In a terminal's foreground the program stays in our process group, keeping the
    /// terminal and job control: forwarded signals go to the program's process only.
    Process,
}

/// One line of `/proc/PID/stat`, the fields the tree needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcEntry {
    pub(crate) pid: i32,
    pub(crate) parent: i32,
    pub(crate) group: i32,
    /// A zombie (or dead) process: ended, whatever its parent has not reaped yet.
    pub(crate) ended: bool,
}

/// Parses `/proc/PID/stat`: `pid (comm) state ppid pgrp ...`; the command name may hold
/// spaces and parentheses, so the fields are read after its last `)`.
pub(crate) fn parse_stat(stat: &str) -> Option<ProcEntry> {
    let (head, rest) = stat.rsplit_once(')')?;
    let pid = head.split_once(" (")?.0.trim().parse().ok()?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some(ProcEntry {
        pid,
        parent,
        group,
        ended: matches!(state, "Z" | "X" | "x"),
    })
}

/// The live descendants of `root` among `entries`, leaving out `excluded` and its own
/// descendants. Pure: the caller reads `/proc`.
pub(crate) fn live_descendants(
    entries: &[ProcEntry],
    root: i32,
    excluded: Option<i32>,
) -> Vec<ProcEntry> {
    let mut children: HashMap<i32, Vec<&ProcEntry>> = HashMap::new();
    for entry in entries {
        children.entry(entry.parent).or_default().push(entry);
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if Some(child.pid) == excluded || child.pid == root {
                continue;
            }
            next.push(child.pid);
            if !child.ended {
                found.push(**child);
            }
        }
    }
    found
}

/// Every process in `/proc`; `None` where it cannot be read.
fn read_proc() -> Option<Vec<ProcEntry>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    let entries = dir
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| parse_stat(&stat))
        .collect();
    Some(entries)
}

/// Every process in `/proc` (none where there is no `/proc`).
fn scan_proc() -> Vec<ProcEntry> {
    read_proc().unwrap_or_default()
}

/// Makes this process a child subreaper (Linux), so that the program's orphans stay ours.
/// Returns whether the whole tree is tracked.
pub(crate) fn become_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_child_subreaper(true).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// The program's tree as `quorum-lock` sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessTree {
    /// `quorum-lock` itself: every process of the tree descends from it.
    pub(crate) supervisor: Pid,
    /// The program: the tree's first process, leader of its own group with [`Target::Group`].
    pub(crate) program: Pid,
    pub(crate) target: Target,
    /// The watchdog, a child of `quorum-lock` that is not part of the tree.
    pub(crate) watchdog: Option<Pid>,
}

impl ProcessTree {
    /// The tree's live processes now, the program included while it runs. Once the
    /// supervisor is gone (its orphans went to init with it), what is left of the tree is
    /// the program and its descendants.
    pub(crate) fn live(&self) -> Vec<ProcEntry> {
        self.live_in(&scan_proc())
    }

    /// [`live`](Self::live) from `entries`, one read of `/proc`.
    fn live_in(&self, entries: &[ProcEntry]) -> Vec<ProcEntry> {
        let excluded = self.watchdog.map(Pid::as_raw);
        let alive = |pid: Pid| (entries.iter()).any(|e| e.pid == pid.as_raw() && !e.ended);
        if alive(self.supervisor) {
            return live_descendants(entries, self.supervisor.as_raw(), excluded);
        }
        let mut left = live_descendants(entries, self.program.as_raw(), excluded);
        left.extend((entries.iter()).filter(|e| e.pid == self.program.as_raw() && !e.ended));
        left
    }

    /// Whether the whole tree has ended, the program included, though not every end has
    /// been reaped yet: true only where `/proc` shows this process and no live process
    /// under it, twice in a row (a process forked during one read shows in the next).
    pub(crate) fn has_ended(&self) -> bool {
        let empty_once = || {
            read_proc().is_some_and(|entries| {
                let me = entries.iter().any(|e| e.pid == self.supervisor.as_raw());
                me && self.live_in(&entries).is_empty()
            })
        };
        empty_once() && empty_once()
    }

    /// Sends `sig` to every live process of the tree: with [`Target::Group`] to the
    /// program's group at once and to each process outside it; returns whether it found
    /// any process to signal.
    pub(crate) fn signal_all(&self, sig: Signal) -> bool {
        let live = self.live();
        // ESRCH: the group is empty, every member is gone or left it.
        let group_hit = self.target == Target::Group && killpg(self.program, sig).is_ok();
        for entry in &live {
            let grouped = self.target == Target::Group && entry.group == self.program.as_raw();
            if !grouped {
                let _ = kill(Pid::from_raw(entry.pid), sig);
            }
        }
        group_hit || !live.is_empty()
    }

    /// Passes on a signal `quorum-lock` received: to the whole tree with [`Target::Group`],
    /// to the program only in a terminal's foreground (the terminal signals the group
    /// itself).
    pub(crate) fn forward(&self, sig: Signal, program_running: bool) {
        match self.target {
            Target::Group => {
                self.signal_all(sig);
            }
            Target::Process if program_running => {
                let _ = kill(self.program, sig);
            }
            Target::Process => {}
        }
    }
}

/// A child of `quorum-lock` that ended: its pid, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reaped {
    pub(crate) pid: Pid,
    pub(crate) status: ExitStatus,
}

/// The wait status as the standard library's `ExitStatus` (the raw `wait` encoding).
fn exit_status(status: WaitStatus) -> Option<(Pid, ExitStatus)> {
    use std::os::unix::process::ExitStatusExt;
    match status {
        WaitStatus::Exited(pid, code) => Some((pid, ExitStatus::from_raw((code & 0xff) << 8))),
        WaitStatus::Signaled(pid, sig, core) => {
            let raw = sig as i32 | if core { 0x80 } else { 0 };
            Some((pid, ExitStatus::from_raw(raw)))
        }
        _ => None,
    }
}

/// Reaps every child of this process on a thread of its own, sending each as it ends; the
/// channel closes once no child is left. Start it after the last child is spawned: the
/// standard library reaps a child whose `exec` failed itself.
pub(crate) fn spawn_reaper() -> std::io::Result<mpsc::UnboundedReceiver<Reaped>> {
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || {
            loop {
                match waitpid(None::<Pid>, None) {
                    Ok(status) => {
                        let Some((pid, status)) = exit_status(status) else {
                            continue;
                        };
                        if sender.send(Reaped { pid, status }).is_err() {
                            return;
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    // ECHILD: no child left.
                    Err(_) => return,
                }
            }
        })?;
    Ok(receiver)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: i32, parent: i32, group: i32) -> ProcEntry {
        ProcEntry {
            pid,
            parent,
            group,
            ended: false,
        }
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 95 0 0 0";
        assert_eq!(parse_stat(line), Some(entry(4242, 1, 4242)));
        let zombie = parse_stat("7 (sh) Z 5 6 6 0").unwrap();
        assert!(zombie.ended);
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("8 (x) S notanumber 1"), None);
    }

    #[test]
    fn descendants_follow_parents_and_skip_the_excluded_and_the_ended() {
        // 10 is the supervisor; 11 the watchdog; 12 the program, whose child 13 left its
        // group and has a child 14; 15 is a zombie; 20 is unrelated.
        let mut zombie = entry(15, 12, 12);
        zombie.ended = true;
        let entries = [
            entry(10, 1, 10),
            entry(11, 10, 11),
            entry(12, 10, 12),
            entry(13, 12, 13),
            entry(14, 13, 13),
            zombie,
            entry(20, 1, 20),
        ];
        let mut pids: Vec<i32> = live_descendants(&entries, 10, Some(11))
            .iter()
            .map(|e| e.pid)
            .collect();
        pids.sort_unstable();
        assert_eq!(pids, [12, 13, 14]);
        assert!(live_descendants(&entries, 20, None).is_empty());
        // A parent loop (pid reuse between reads) cannot make the walk spin.
        let looped = [entry(30, 31, 30), entry(31, 30, 30)];
        assert_eq!(live_descendants(&looped, 30, None).len(), 1);
    }
}
