//! The assignment this worker acts on, and the task threads it runs.
//!
//! The operator decides the assignment (`contract::assignment::rule`) and sends the document to every
//! worker pod (`PUT /v1/assignment`). A worker never acts on a generation older than one it
//! has seen: the newest generation is written to the state volume before it is acted on, so a
//! restarted worker refuses a late, older document too. Until the first document arrives, a
//! StatefulSet pod runs nothing (or, started by hand with `--replicas`, its static share in
//! `share.rs`) and standalone mode runs every task.
//!
//! Acting on a document is a change of each task's role ([`TaskSlot::set_role`]): tasks new
//! to this pod start, promoted standbys take over, released actives commit and become
//! standbys, tasks no longer here stop.
//!
//! A pod that restarts with a recorded document waits for the operator's, which comes within
//! a second while one leads: the record may be older than the document in force (the operator
//! moved this pod's tasks while it was down), and claiming a task the record gives it would
//! fence the task's newer owner. When none comes within [`RESUME_AFTER`], no operator leads
//! (it is being replaced, or was uninstalled), and the worker runs its record again
//! ([`Assignments::resume_recorded`]), so a crashed pod's tasks do not wait for an operator.
//! Every input commit names the generation it was made under (`task::active::commit_mark`); an active
//! task whose last commit names a newer generation than the record has moved on, and runs
//! here only as a standby until a newer document says otherwise.

use crate::task::{Role, TaskError, TaskSlot, WorkerContext};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use streamkeeper_contract::{AssignmentDocument, FormatError, Versioned};

/// How long a restarted pod waits for the operator's document before it runs its record again:
/// far above the second a leading operator takes to send. A takeover after a leader's silent
/// death can take longer (the Lease's duration: 15 s by the chart's default); a resume during
/// one is safe, since tasks committed under a newer document are held back, and an owner
/// fenced anyway is given its task again by the next leader.
pub const RESUME_AFTER: Duration = Duration::from_secs(10);

/// Why a document was not acted on.
#[derive(Debug, thiserror::Error)]
pub enum AssignmentRefused {
    #[error(
        "assignment generation {got} is older than generation {seen}, which this worker has acted on"
    )]
    Stale { seen: u64, got: u64 },
    #[error(
        "assignment generation {0} differs from the document of the same generation this worker has"
    )]
    Conflict(u64),
    #[error("not an assignment document: {0}")]
    Invalid(#[from] FormatError),
    #[error("this worker is shutting down; it takes no new assignment")]
    ShuttingDown,
    #[error("cannot record generation {generation} in {path}: {source}")]
    NotRecorded {
        generation: u64,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl AssignmentRefused {
    /// The HTTP status the refusal answers with.
    pub fn status(&self) -> u16 {
        match self {
            AssignmentRefused::Stale { .. } | AssignmentRefused::Conflict(_) => 409,
            AssignmentRefused::Invalid(_) => 400,
            AssignmentRefused::ShuttingDown => 503,
            AssignmentRefused::NotRecorded { .. } => 500,
        }
    }
}

/// What this pod runs under a document, by task.
pub fn roles_of(document: &AssignmentDocument, pod: &str) -> BTreeMap<u32, Role> {
    let mut roles = BTreeMap::new();
    for task in document.standby_tasks_of(pod) {
        roles.insert(task, Role::Standby);
    }
    for task in document.active_tasks_of(pod) {
        roles.insert(task, Role::Active);
    }
    roles
}

/// The roles this pod runs when it acts on its `record` again without an operator, and the
/// active tasks it holds back as standbys: those whose last input commit (`last_commits`: the
/// generation each commit names) was made under a newer generation than the record, by an
/// owner the record does not know.
pub fn resumed_roles(
    record: &AssignmentDocument,
    pod: &str,
    last_commits: &BTreeMap<u32, u64>,
) -> (BTreeMap<u32, Role>, BTreeSet<u32>) {
    let mut roles = roles_of(record, pod);
    let mut held_back = BTreeSet::new();
    for (task, role) in &mut roles {
        let moved_on = last_commits
            .get(task)
            .is_some_and(|&generation| generation > record.generation);
        if *role == Role::Active && moved_on {
            *role = Role::Standby;
            held_back.insert(*task);
        }
    }
    (roles, held_back)
}

/// The worker's tasks and the document they follow.
pub struct Assignments {
    context: WorkerContext,
    pod: String,
    record: PathBuf,
    /// The generation acted on (0: none), readable without [`Assignments::state`]'s lock: the
    /// HTTP handlers read it, and must never wait for a document being acted on.
    generation: AtomicU64,
    state: Mutex<State>,
}

struct State {
    document: Option<AssignmentDocument>,
    /// A document was acted on since this start (sent, or the record resumed).
    acted: bool,
    /// Tasks the resumed record names active here that run as standbys (see
    /// [`resumed_roles`]). The record sent again (an old leader's late send) leaves them
    /// standbys too; a newer document decides afresh.
    held_back: BTreeSet<u32>,
    slots: BTreeMap<u32, TaskSlot>,
    /// Tasks no longer on this pod whose threads may still be ending (a copy dropped while it
    /// downloads a checkpoint stops within about a second). Nobody waits for them: a task that
    /// comes back starts its new thread behind the old one ([`TaskSlot::start`]), and
    /// [`Assignments::join_all`] joins them at shutdown.
    closing: BTreeMap<u32, TaskSlot>,
}

impl State {
    /// Starts task `task`'s thread, behind the old one if the task is still closing here.
    fn start_slot(&mut self, context: &WorkerContext, task: u32, role: Role, generation: u64) {
        let previous = self.closing.remove(&task);
        let slot = TaskSlot::start(context, task, role, generation, previous);
        self.slots.insert(task, slot);
    }

    /// Joins the closing threads that have ended (at once: they are done).
    fn reap_closed(&mut self) {
        let ended: Vec<u32> = self
            .closing
            .iter()
            .filter(|(_, slot)| slot.is_finished())
            .map(|(&task, _)| task)
            .collect();
        for task in ended {
            if let Some(slot) = self.closing.remove(&task) {
                slot.join();
            }
        }
    }
}

impl Assignments {
    /// `pod`: this worker's pod name, as the documents name it. Reads the newest generation
    /// recorded on the state volume.
    pub fn new(context: WorkerContext, pod: String) -> Self {
        let record = record_path(&context.config.state.dir);
        let document = read_record(&record);
        if let Some(document) = &document {
            tracing::info!(generation = document.generation, path = %record.display(), "newest assignment generation seen before this start; older ones are refused");
            context
                .metrics
                .assignment_generation
                .set(gauge(document.generation));
        }
        Self {
            context,
            pod,
            record,
            generation: AtomicU64::new(document.as_ref().map_or(0, |d| d.generation)),
            state: Mutex::new(State {
                document,
                acted: false,
                held_back: BTreeSet::new(),
                slots: BTreeMap::new(),
                closing: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `tasks` as actives until a document says otherwise (the static share). Not once
    /// this pod has had a document (now or before a restart): the operator's assignment may
    /// have moved those tasks, and claiming them would fence their owners.
    pub fn start_static(&self, tasks: &[u32]) {
        let mut state = self.lock();
        if let Some(document) = &state.document {
            tracing::info!(
                generation = document.generation,
                "waiting for the operator's assignment instead of the static share"
            );
            return;
        }
        for &task in tasks {
            if !state.slots.contains_key(&task) {
                state.start_slot(&self.context, task, Role::Active, 0);
            }
        }
    }

    /// The generation of the document this pod acts on (recorded on its volume), if any.
    /// Never waits: a document being acted on does not hold it up.
    pub fn generation(&self) -> Option<u64> {
        Some(self.generation.load(Ordering::SeqCst)).filter(|&g| g > 0)
    }

    /// The worker is shutting down: its tasks are ending, and it starts no new ones.
    pub fn stopping(&self) -> bool {
        self.context.shutdown.load(Ordering::SeqCst)
    }

    /// Acts on `document` (JSON). Returns the roles this pod now runs.
    pub fn apply(&self, body: &[u8]) -> Result<BTreeMap<u32, Role>, AssignmentRefused> {
        let document = AssignmentDocument::from_json(body)?;
        let mut state = self.lock();
        // Checked under the lock `join_all` takes the slots under: a task started after the
        // shutdown began would never be joined, and would take copies the operator has moved
        // elsewhere (it reads `stopping` from the reports and gives this pod nothing).
        if self.stopping() {
            return Err(AssignmentRefused::ShuttingDown);
        }
        if let Some(seen) = &state.document {
            if document.generation < seen.generation {
                return Err(AssignmentRefused::Stale {
                    seen: seen.generation,
                    got: document.generation,
                });
            }
            if document.generation == seen.generation && document != *seen {
                return Err(AssignmentRefused::Conflict(document.generation));
            }
        }
        let changed = state.document.as_ref() != Some(&document);
        if changed {
            write_record(&self.record, &document)?;
        }
        let mut roles = roles_of(&document, &self.pod);
        if changed {
            state.held_back.clear();
        }
        for task in &state.held_back {
            roles.entry(*task).and_modify(|role| *role = Role::Standby);
        }
        state.acted = true;
        // Roles change at once, promotions first of all. The threads of tasks no longer here
        // are asked to stop and left to end on their own, never joined here: a copy still
        // restoring can take a second to stop, and neither this document's answer nor a
        // takeover may wait for it.
        state.reap_closed();
        for (&task, &role) in &roles {
            match state.slots.get(&task) {
                Some(slot) => slot.set_role(role, document.generation),
                None => state.start_slot(&self.context, task, role, document.generation),
            }
        }
        let dropped: Vec<u32> = state
            .slots
            .keys()
            .filter(|task| !roles.contains_key(task))
            .copied()
            .collect();
        for task in dropped {
            if let Some(slot) = state.slots.remove(&task) {
                slot.set_role(Role::Dropped, document.generation);
                state.closing.insert(task, slot);
            }
        }
        if changed {
            tracing::info!(generation = document.generation, roles = ?roles, "acting on assignment");
            self.context
                .metrics
                .assignment_generation
                .set(gauge(document.generation));
        }
        self.generation.store(document.generation, Ordering::SeqCst);
        state.document = Some(document);
        Ok(roles)
    }

    /// Runs the document recorded before this start when [`RESUME_AFTER`] passes with no
    /// document sent; retries while Kafka does not answer. Returns once resumed, once a
    /// document came, or at shutdown.
    pub fn resume_when_no_operator(&self) {
        let deadline = Instant::now() + RESUME_AFTER;
        while Instant::now() < deadline {
            if self.stopping() || self.lock().acted {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut backoff = Duration::from_millis(200);
        let read = |tasks: &[u32]| {
            crate::task::last_commit_generations(&self.context, tasks, Duration::from_secs(10))
        };
        while !self.stopping() {
            match self.resume_recorded(read) {
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(%error, retry_in_ms = backoff.as_millis() as u64, "cannot read the tasks' last commits to resume the recorded assignment; retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Runs the recorded document again, unless a document was acted on since this start (or
    /// there is no record). `last_commits`: the generation each active task's last input
    /// commit was made under. Returns the roles started.
    pub fn resume_recorded(
        &self,
        last_commits: impl FnOnce(&[u32]) -> Result<BTreeMap<u32, u64>, TaskError>,
    ) -> Result<Option<BTreeMap<u32, Role>>, TaskError> {
        let record = {
            let state = self.lock();
            match &state.document {
                Some(record) if !state.acted && !self.stopping() => record.clone(),
                _ => return Ok(None),
            }
        };
        let actives: Vec<u32> = record.active_tasks_of(&self.pod).collect();
        let commits = if actives.is_empty() {
            BTreeMap::new()
        } else {
            last_commits(&actives)?
        };
        let (roles, held_back) = resumed_roles(&record, &self.pod, &commits);
        let mut state = self.lock();
        // Checked again: a document that came while Kafka was asked is the one to follow.
        if state.acted || self.stopping() {
            return Ok(None);
        }
        for (&task, &role) in &roles {
            if !state.slots.contains_key(&task) {
                state.start_slot(&self.context, task, role, record.generation);
            }
        }
        self.context.metrics.assignment_resumes.inc();
        tracing::warn!(generation = record.generation, roles = ?roles, held_back = ?held_back, after_seconds = RESUME_AFTER.as_secs(), "no operator sent an assignment: running the one recorded before this start (tasks committed under a newer generation run as standbys)");
        state.acted = true;
        state.held_back = held_back;
        Ok(Some(roles))
    }

    /// Waits for every task thread to end (after the worker's shutdown flag is set).
    pub fn join_all(&self) {
        let (slots, closing) = {
            let mut state = self.lock();
            (
                std::mem::take(&mut state.slots),
                std::mem::take(&mut state.closing),
            )
        };
        for slot in slots.into_values().chain(closing.into_values()) {
            slot.join();
        }
    }
}

fn gauge(generation: u64) -> i64 {
    i64::try_from(generation).unwrap_or(i64::MAX)
}

fn record_path(state_dir: &Path) -> PathBuf {
    state_dir.join("assignment.json")
}

fn read_record(path: &Path) -> Option<AssignmentDocument> {
    let bytes = std::fs::read(path).ok()?;
    match AssignmentDocument::from_json(&bytes) {
        Ok(document) => Some(document),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "ignoring an unreadable assignment record");
            None
        }
    }
}

/// Writes the document next to the state, durably (temporary file, fsync, rename).
fn write_record(path: &Path, document: &AssignmentDocument) -> Result<(), AssignmentRefused> {
    use std::io::Write;
    let failed = |source| AssignmentRefused::NotRecorded {
        generation: document.generation,
        path: path.to_path_buf(),
        source,
    };
    let temporary = path.with_extension("json.tmp");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let mut file = std::fs::File::create(&temporary).map_err(failed)?;
    file.write_all(&document.to_json()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)?;
    // The rename is durable only once the directory is: without this, a power loss after the
    // answer could bring back the older record, and a late older document would be acted on.
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|dir| dir.sync_all())
            .map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamkeeper_contract::TaskAssignment;

    fn document(generation: u64) -> AssignmentDocument {
        AssignmentDocument {
            version: 1,
            generation,
            tasks: vec![
                TaskAssignment {
                    task: 0,
                    active: Some("job-0".into()),
                    standbys: vec!["job-1".into()],
                },
                TaskAssignment {
                    task: 1,
                    active: Some("job-1".into()),
                    standbys: vec!["job-0".into()],
                },
                TaskAssignment {
                    task: 2,
                    active: Some("job-2".into()),
                    standbys: vec![],
                },
            ],
        }
    }

    #[test]
    fn a_pod_runs_its_actives_and_standbys_only() {
        let roles = roles_of(&document(3), "job-0");
        assert_eq!(
            roles,
            BTreeMap::from([(0, Role::Active), (1, Role::Standby)])
        );
        assert!(roles_of(&document(3), "job-9").is_empty());
    }

    #[test]
    fn a_resumed_record_holds_back_the_actives_committed_under_a_newer_generation() {
        let record = document(3);
        let (roles, held) = resumed_roles(&record, "job-0", &BTreeMap::new());
        assert_eq!(
            roles,
            roles_of(&record, "job-0"),
            "no marks: the record as it is"
        );
        assert!(held.is_empty());
        let (roles, held) = resumed_roles(&record, "job-0", &BTreeMap::from([(0, 3), (1, 9)]));
        assert_eq!(
            roles,
            BTreeMap::from([(0, Role::Active), (1, Role::Standby)]),
            "committed under its own generation: still its own; task 1 was a standby anyway"
        );
        assert!(held.is_empty());
        let (roles, held) = resumed_roles(&record, "job-0", &BTreeMap::from([(0, 4)]));
        assert_eq!(
            roles,
            BTreeMap::from([(0, Role::Standby), (1, Role::Standby)])
        );
        assert_eq!(held, BTreeSet::from([0]));
    }

    #[test]
    fn only_a_record_no_document_followed_is_resumed() {
        let dir = tempfile::tempdir().unwrap();
        // Kafka is asked only when there is a record to resume, with active tasks in it.
        let unasked = |_: &[u32]| -> Result<BTreeMap<u32, u64>, TaskError> {
            Err(TaskError::Internal("asked".into()))
        };
        let fresh = Assignments::new(context(dir.path()), "job-9".into());
        assert!(
            fresh.resume_recorded(unasked).unwrap().is_none(),
            "no record"
        );
        // A document this start acted on is followed, never replaced by the record.
        fresh.apply(&document(4).to_json()).unwrap();
        assert!(fresh.resume_recorded(unasked).unwrap().is_none());
        // After a restart the record is resumed (job-9 has no task in it, so nothing starts).
        let restarted = Assignments::new(context(dir.path()), "job-9".into());
        assert_eq!(restarted.generation(), Some(4));
        let resumed = restarted.resume_recorded(|_| Ok(BTreeMap::new())).unwrap();
        assert_eq!(resumed, Some(BTreeMap::new()));
        assert_eq!(restarted.context.metrics.assignment_resumes.get(), 1);
        assert!(
            restarted.resume_recorded(unasked).unwrap().is_none(),
            "once"
        );
    }

    /// A worker context on a state dir of its own, as a pod's worker has.
    fn context(state_dir: &Path) -> WorkerContext {
        let example = include_str!("../../../examples/worker-standalone.yaml");
        let mut config = streamkeeper_contract::WorkerConfig::from_yaml(example).unwrap();
        config.state.dir = state_dir.to_path_buf();
        config.checkpoint.s3 = None;
        let processor = crate::processor::Registry::default()
            .resolve(&config.processor)
            .unwrap();
        WorkerContext {
            processor: std::sync::Arc::new(processor),
            block_cache: crate::store::BlockCache::new(1 << 20),
            config: std::sync::Arc::new(config),
            metrics: crate::metrics::WorkerMetrics::new(),
            board: crate::board::TaskBoard::default(),
            shutdown: std::sync::Arc::default(),
            checkpoints: None,
            restore_request: None,
            task_stop: std::sync::Arc::default(),
            promoted_at: None,
            generation: 0,
            admin: Default::default(),
        }
    }

    #[test]
    fn a_worker_that_is_shutting_down_takes_no_new_assignment() {
        let dir = tempfile::tempdir().unwrap();
        let context = context(dir.path());
        let shutdown = std::sync::Arc::clone(&context.shutdown);
        let assignments = Assignments::new(context, "job-2".into());
        assert!(!assignments.stopping());
        shutdown.store(true, Ordering::SeqCst);
        assert!(assignments.stopping());
        // Task 2 would start here; a task started now would never be joined, and the operator,
        // told this worker is stopping, has given its copies to other pods.
        let refused = assignments.apply(&document(4).to_json()).unwrap_err();
        assert!(
            matches!(refused, AssignmentRefused::ShuttingDown),
            "{refused}"
        );
        assert_eq!(refused.status(), 503);
        assert!(assignments.lock().slots.is_empty());
        assert!(
            read_record(&record_path(dir.path())).is_none(),
            "not recorded either"
        );
    }

    #[test]
    fn the_record_survives_a_restart_and_an_unreadable_one_is_ignored() {
        let dir = std::env::temp_dir().join(format!("sk-assignment-{}", std::process::id()));
        let path = record_path(&dir);
        write_record(&path, &document(7)).unwrap();
        assert_eq!(read_record(&path), Some(document(7)));
        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(read_record(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
