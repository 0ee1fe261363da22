//! A task's place on this worker: one thread that keeps the task's RocksDB store open and runs
//! the task in the role the assignment gives it, switching without closing the store.
//!
//! - **Standby → active (a promotion):** the standby applies what it has read and stops
//!   tailing; the active path claims the task (`init_transactions` fences the old owner and
//!   aborts its open transaction), replays the few changelog records the standby had not
//!   applied, resumes the input from the state's position and commits.
//! - **Active → standby (a handoff):** the active loop commits its open transaction and stops;
//!   the same state then tails the changelog as a standby.
//! - **Fenced:** a newer owner claimed the task (this pod was wrongly thought dead, or the
//!   assignment moved on without it). The task stops writing at once and waits as a standby;
//!   only a newer assignment may make it active again, so two owners never fence each other in
//!   turn.

use super::phase::PhaseTracker;
use super::{RoleEnd, WorkerContext, run_active, run_standby};
use crate::store::RocksStore;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use streamkeeper_contract::task_report::{TaskPhase, TaskReport, TaskRole};

/// What the assignment wants of a task on this worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Active,
    Standby,
    /// Not on this worker any more: close the store and end the thread.
    Dropped,
}

#[derive(Debug, Clone, Copy)]
struct Wanted {
    role: Role,
    /// The assignment generation that asked for `role`.
    generation: u64,
    since: Instant,
    /// The generation whose active role ended in a fence: only a newer one may claim the task
    /// again, so two owners never fence each other in turn.
    fenced_in: Option<u64>,
}

impl Wanted {
    /// The role to run: a fenced task waits as a standby until a newer assignment.
    fn effective(&self) -> Role {
        match self.role {
            Role::Active if self.fenced_in.is_some_and(|g| g >= self.generation) => Role::Standby,
            role => role,
        }
    }
}

/// The role a task's thread should run, set by the assignment and read by the thread.
#[derive(Debug)]
struct RoleCell {
    wanted: Mutex<Wanted>,
    changed: Condvar,
    /// Set when `wanted` changes: the running role winds down (see `WorkerContext::shutting_down`).
    stop: Arc<AtomicBool>,
}

impl RoleCell {
    fn new(role: Role, generation: u64) -> Self {
        Self {
            wanted: Mutex::new(Wanted {
                role,
                generation,
                since: Instant::now(),
                fenced_in: None,
            }),
            changed: Condvar::new(),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Wanted> {
        self.wanted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the wanted role; asks the running role to stop when the role to run changes.
    fn want(&self, role: Role, generation: u64) {
        let mut wanted = self.lock();
        let before = wanted.effective();
        if role != wanted.role {
            wanted.since = Instant::now();
        }
        wanted.role = role;
        wanted.generation = generation;
        if wanted.effective() != before {
            self.stop.store(true, Ordering::SeqCst);
        }
        self.changed.notify_all();
    }

    /// The active role ended in a fence. Recorded under the generation in force now, not the
    /// one the role started under: a newer document that kept the role active changed only
    /// this cell, and a fence recorded under the older one would let that newer one claim the
    /// task straight back (two owners fencing each other in turn while this pod receives no
    /// documents).
    fn fenced(&self) {
        let mut wanted = self.lock();
        wanted.fenced_in = Some(wanted.generation);
    }
}

/// The handle of a task's thread.
#[derive(Debug)]
pub struct TaskSlot {
    cell: Arc<RoleCell>,
    thread: Option<JoinHandle<()>>,
}

impl TaskSlot {
    /// Starts task `task`'s thread in `role`. `previous`: the task's earlier thread on this
    /// worker, still ending; the new one waits for it first (it holds the task's store open).
    pub fn start(
        context: &WorkerContext,
        task: u32,
        role: Role,
        generation: u64,
        previous: Option<TaskSlot>,
    ) -> Self {
        let cell = Arc::new(RoleCell::new(role, generation));
        let mut context = context.clone();
        context.task_stop = Arc::clone(&cell.stop);
        let thread_cell = Arc::clone(&cell);
        let thread = std::thread::Builder::new()
            .name(format!("task-{task}"))
            .spawn(move || {
                if let Some(previous) = previous {
                    previous.join();
                }
                start_metrics(&context, task);
                run_slot(context, task, &thread_cell);
            });
        match thread {
            Ok(handle) => Self {
                cell,
                thread: Some(handle),
            },
            Err(error) => {
                tracing::error!(task, %error, "cannot start the task's thread");
                Self { cell, thread: None }
            }
        }
    }

    /// Asks the task to take `role` under assignment `generation` (nothing changes for the
    /// running role when it already is that role).
    pub fn set_role(&self, role: Role, generation: u64) {
        self.cell.want(role, generation);
    }

    pub fn role(&self) -> Role {
        self.cell.lock().role
    }

    /// Whether the thread has ended (joining it then returns at once).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the thread to end (after shutdown or [`Role::Dropped`]).
    pub fn join(mut self) {
        self.cell.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run_slot(mut context: WorkerContext, task: u32, cell: &RoleCell) {
    let span = tracing::info_span!("task", task, job = %context.config.job.name);
    let _entered = span.enter();
    let mut store: Option<RocksStore> = None;
    let mut phase = PhaseTracker::new(task, context.board.clone(), context.metrics.clone());
    let mut ran: Option<Role> = None;
    while !context.shutdown.load(Ordering::SeqCst) {
        let wanted = {
            let wanted = *cell.lock();
            cell.stop.store(false, Ordering::SeqCst);
            wanted
        };
        let role = wanted.effective();
        if role == Role::Dropped {
            break;
        }
        let board_role = match role {
            Role::Active => TaskRole::Active,
            _ => TaskRole::Standby,
        };
        context.board.register(TaskReport {
            // Said only while the fence is what keeps the task a standby here.
            fenced_in: wanted.fenced_in.filter(|_| role != wanted.role),
            ..TaskReport::new(task, board_role)
        });
        context.generation = wanted.generation;
        context.promoted_at =
            (role == Role::Active && ran == Some(Role::Standby)).then_some(wanted.since);
        if context.promoted_at.is_some() {
            context.metrics.promotions.get_or_create(&label(task)).inc();
            tracing::info!(
                task,
                generation = wanted.generation,
                "standby promoted to active"
            );
        }
        let ended = match role {
            Role::Active => run_active(&context, task, &mut store, &mut phase),
            _ => run_standby(&context, task, &mut store, &mut phase),
        };
        let shutting_down = context.shutdown.load(Ordering::SeqCst);
        if role == Role::Active
            && let Some(service) = &context.checkpoints
        {
            service.release(task);
        }
        match ended {
            // The generation in force now, not the one this role started under: a newer
            // document that kept the role active changed only the cell, and a fence recorded
            // under the older one would let that newer one claim the task straight back (two
            // owners fencing each other in turn while this pod receives no documents).
            RoleEnd::Fenced => cell.fenced(),
            RoleEnd::Released if role == Role::Active && !shutting_down => {
                context.metrics.handoffs.get_or_create(&label(task)).inc();
                tracing::info!(task, "active task committed and released");
            }
            RoleEnd::Failed => wait_for_change(&context, cell, wanted.generation),
            RoleEnd::Released => {}
        }
        ran = Some(role);
    }
    close(task, store.as_ref(), &mut phase);
    if !context.shutdown.load(Ordering::SeqCst) {
        // Dropped: the task left this pod, and its report goes with it. Left on the board as a
        // stopped active, it would keep the pod unready for good (readiness waits for every
        // active task to run), which the job shows as Degraded and a PodDisruptionBudget
        // counts as a disruption. A successor thread of this task waits for this one to end
        // before it registers, so it is never removed by it.
        context.board.remove(task);
    }
}

fn label(task: u32) -> crate::metrics::TaskLabel {
    crate::metrics::TaskLabel { task }
}

/// After a role failed for good, blocks until the wanted role or generation changes.
fn wait_for_change(context: &WorkerContext, cell: &RoleCell, generation: u64) {
    let mut wanted = cell.lock();
    while !context.shutdown.load(Ordering::SeqCst)
        && !cell.stop.load(Ordering::SeqCst)
        && wanted.generation == generation
    {
        wanted = cell
            .changed
            .wait_timeout(wanted, Duration::from_millis(200))
            .map(|(guard, _)| guard)
            .unwrap_or_else(|poison| poison.into_inner().0);
    }
}

fn close(task: u32, store: Option<&RocksStore>, phase: &mut PhaseTracker) {
    if let Some(store) = store
        && let Err(error) = store.flush()
    {
        tracing::warn!(task, %error, "flushing state at shutdown failed (the WAL still has it)");
    }
    phase.enter(
        TaskPhase::Stopped,
        Some("task stopped on this worker".into()),
    );
}

/// Starts the task's counters at 0, with every reason they can be counted for.
fn start_metrics(context: &WorkerContext, task: u32) {
    let dead_letter: Vec<&str> = super::active::dead_letter::reasons().collect();
    let dropped = crate::processor::DropReason::ALL.map(|r| r.as_str());
    let repairs = super::active::input_position::Disagreement::ALL.map(|d| d.as_str());
    context.metrics.start_task(
        task,
        &crate::metrics::TaskReasons {
            dead_letter: &dead_letter,
            dropped: &dropped,
            errors: &super::TaskError::CATEGORIES,
            repairs: &repairs,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_holds_until_a_generation_newer_than_the_one_in_force() {
        let cell = RoleCell::new(Role::Active, 5);
        // The role started under 5; a document of 6 keeps it active while it runs.
        let started_under = *cell.lock();
        cell.want(Role::Active, 6);
        assert!(
            !cell.stop.load(Ordering::SeqCst),
            "the same role goes on running"
        );
        cell.fenced();
        assert_eq!(started_under.generation, 5);
        assert_eq!(
            cell.lock().effective(),
            Role::Standby,
            "fenced under 6: generation 6 does not claim again"
        );
        cell.want(Role::Active, 6);
        assert_eq!(cell.lock().effective(), Role::Standby);
        cell.want(Role::Active, 7);
        assert_eq!(
            cell.lock().effective(),
            Role::Active,
            "a newer document may"
        );
    }
}
