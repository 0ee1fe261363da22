//! Real crashes: a child process (this test binary, re-run on one entry test) writes to a
//! store and is killed with SIGKILL at swept points; the parent reopens the directory and
//! checks what survived against a model. Also checks the lock across processes (the child
//! holds the store).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rocksdb::DB;
use streamkeeper_contract::worker_config::RocksDbTuning;
use tempfile::tempdir;

use crate::store::test_support::{bytes, meta, open, open_empty, tuning};
use crate::store::{
    ChangeSet, OpenOutcome, RocksStore, StateStore, StoreError, TaskMetadata, db_path,
};

const SCENARIO: &str = "STREAMKEEPER_STORE_CRASH_SCENARIO";
const DIR: &str = "STREAMKEEPER_STORE_CRASH_DIR";
const READY: &str = "STORE-CHILD-READY";

/// The child's side. A no-op in a normal test run (the variable is unset).
#[test]
fn child_process_entry() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    match scenario.as_str() {
        "hold_store" => {
            let _held = open(&dir, 0);
            park()
        }
        "hold_raw_db" => {
            let _held = DB::open_default(db_path(&dir, 0)).unwrap();
            park()
        }
        "commit_forever" => {
            let mut store = open_empty(&dir, 0);
            let started = Instant::now();
            for n in 1.. {
                store.commit(&commit_step(n), &meta(0, n, n)).unwrap();
                if n == 1 {
                    ready();
                }
                if started.elapsed() > Duration::from_secs(10) {
                    break;
                }
            }
            park()
        }
        "restore_unfinished" | "restore_finished" | "restore_flushing" => {
            let small = RocksDbTuning {
                write_buffer_bytes: 64 << 10,
                ..tuning()
            };
            let flushing = scenario == "restore_flushing";
            let normal = tuning();
            let opened = RocksStore::open(&dir, 0, if flushing { &small } else { &normal });
            let mut store = opened.unwrap().store;
            store.commit(&restore_base(), &meta(0, 7, 10)).unwrap();
            for i in 1..=RESTORE_BATCHES {
                store
                    .restore_batch(&restore_step(i), &restore_meta(i))
                    .unwrap();
            }
            if scenario == "restore_finished" {
                store.finish_restore().unwrap();
            }
            park()
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn ready() {
    let mut out = std::io::stdout();
    // On a line of its own: the harness may have printed the test name without a newline.
    writeln!(out, "\n{READY}").unwrap();
    out.flush().unwrap();
}

/// Says it is ready, then waits to be killed (or exits when the parent is gone).
fn park() -> ! {
    ready();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::process::exit(0)
}

/// The parent's handle on a child; killed (SIGKILL) at the latest when dropped.
struct Crashable {
    child: Child,
}

impl Crashable {
    fn start(scenario: &str, dir: &Path) -> Self {
        let module = module_path!().split_once("::").unwrap().1;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                &format!("{module}::child_process_entry"),
                "--exact",
                "--nocapture",
            ])
            .args(["--test-threads=1"])
            .env(SCENARIO, scenario)
            .env(DIR, dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let me = Self { child };
        me.wait_ready(scenario, stdout);
        me
    }

    /// Waits for the ready line (the test harness may print its own text before it on the
    /// same line), with a deadline so a stuck child fails the test instead of hanging it.
    fn wait_ready(&self, scenario: &str, stdout: BufReader<ChildStdout>) {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let ready = line.is_ok_and(|l| l.contains(READY));
                if ready {
                    let _ = tx.send(());
                    return;
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("child {scenario} exited before it was ready")
            }
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("child {scenario} never got ready"),
        }
    }

    /// SIGKILL, like `kill -9`: no destructor, no flush, no clean close.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Crashable {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn apply(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, changes: &ChangeSet) {
    for (k, v) in changes.iter() {
        match v {
            Some(v) => model.insert(k.to_vec(), v.to_vec()),
            None => model.remove(k),
        };
    }
}

fn everything(store: &RocksStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    store.scan(b"", &[0xff; 4]).unwrap().into_iter().collect()
}

/// Transaction `n` of the commit loop: overwrites, deletes and a running total.
fn commit_step(n: i64) -> ChangeSet {
    let mut c = ChangeSet::new();
    c.put(format!("c{}", n % 5).as_bytes(), bytes(&n.to_string()));
    c.delete(format!("c{}", (n + 2) % 5).as_bytes());
    c.put(b"ctotal", bytes(&n.to_string()));
    c
}

const RESTORE_BATCHES: i64 = 300;

fn restore_base() -> ChangeSet {
    let mut c = ChangeSet::new();
    c.put(b"base", bytes("kept"));
    c
}

/// Restore batch `i`: 20 puts of ~200 bytes over 50 keys, and one delete.
fn restore_step(i: i64) -> ChangeSet {
    let mut c = ChangeSet::new();
    for x in 0..20 {
        let key = format!("r{:02}", (i * 20 + x) % 50);
        c.put(
            key.as_bytes(),
            format!("{i}:{}", "v".repeat(200)).into_bytes(),
        );
    }
    c.delete(format!("r{:02}", (i * 3) % 50).as_bytes());
    c
}

fn restore_meta(i: i64) -> TaskMetadata {
    meta(0, 7, 10 + 10 * i)
}

/// The state after the base commit and restore batches `1..=j`.
fn restore_model(j: i64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    apply(&mut model, &restore_base());
    for i in 1..=j {
        apply(&mut model, &restore_step(i));
    }
    model
}

#[test]
fn a_commit_that_returned_survives_kill_9_and_commits_are_atomic() {
    for delay_ms in [0, 2, 7, 20, 60] {
        let dir = tempdir().unwrap();
        let child = Crashable::start("commit_forever", dir.path());
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill();

        let opened = open(dir.path(), 0);
        let OpenOutcome::Valid(found) = opened.outcome else {
            panic!("after kill at {delay_ms} ms: {:?}", opened.outcome);
        };
        let n = found.next_input_offset;
        assert!(n >= 1, "the first commit returned before the kill");
        assert_eq!(found, meta(0, n, n));
        let mut model = BTreeMap::new();
        for i in 1..=n {
            apply(&mut model, &commit_step(i));
        }
        assert_eq!(
            everything(&opened.store),
            model,
            "state is exactly commits 1..={n}"
        );
    }
}

#[test]
fn a_killed_restore_reopens_interrupted_and_consistent_then_resumes() {
    let dir = tempdir().unwrap();
    Crashable::start("restore_unfinished", dir.path()).kill();

    let opened = open(dir.path(), 0);
    let OpenOutcome::Interrupted(found) = opened.outcome else {
        panic!("a killed restore must not open as {:?}", opened.outcome);
    };
    let j = (found.next_changelog_offset - 10) / 10;
    // Only the first (logged) batch survives: the unlogged ones died with the process,
    // which is what makes this a real crash and not a clean close.
    assert_eq!(j, 1, "surviving batches");
    assert_eq!(
        found,
        TaskMetadata {
            restoring: true,
            ..restore_meta(j)
        }
    );
    let mut store = opened.store;
    assert_eq!(everything(&store), restore_model(j));

    for i in j + 1..=RESTORE_BATCHES {
        store
            .restore_batch(&restore_step(i), &restore_meta(i))
            .unwrap();
    }
    store.finish_restore().unwrap();
    drop(store);
    let reopened = open(dir.path(), 0);
    assert_eq!(
        reopened.outcome,
        OpenOutcome::Valid(restore_meta(RESTORE_BATCHES))
    );
    assert_eq!(everything(&reopened.store), restore_model(RESTORE_BATCHES));
}

#[test]
fn a_killed_restore_with_flushes_keeps_a_consistent_prefix() {
    let dir = tempdir().unwrap();
    Crashable::start("restore_flushing", dir.path()).kill();

    let opened = open(dir.path(), 0);
    let OpenOutcome::Interrupted(found) = opened.outcome else {
        panic!("a killed restore must not open as {:?}", opened.outcome);
    };
    let j = (found.next_changelog_offset - 10) / 10;
    assert!((1..=RESTORE_BATCHES).contains(&j), "{j}");
    assert!(j > 1, "small memtables flushed some unlogged batches ({j})");
    assert_eq!(
        everything(&opened.store),
        restore_model(j),
        "state matches batch {j}"
    );
}

#[test]
fn a_finished_restore_survives_kill_9() {
    let dir = tempdir().unwrap();
    Crashable::start("restore_finished", dir.path()).kill();
    let opened = open(dir.path(), 0);
    assert_eq!(
        opened.outcome,
        OpenOutcome::Valid(restore_meta(RESTORE_BATCHES))
    );
    assert_eq!(everything(&opened.store), restore_model(RESTORE_BATCHES));
}

#[test]
fn another_process_holding_the_store_makes_open_fail_locked() {
    let dir = tempdir().unwrap();
    let child = Crashable::start("hold_store", dir.path());
    let error = RocksStore::open(dir.path(), 0, &tuning()).unwrap_err();
    assert!(
        matches!(&error, StoreError::Locked { path, .. } if path.ends_with("task-0/owner.lock")),
        "{error:?}"
    );
    child.kill();
    assert_eq!(
        open(dir.path(), 0).outcome,
        OpenOutcome::Empty,
        "the lock dies with its process"
    );
}

#[test]
fn rocksdbs_lock_refuses_a_second_process() {
    let dir = tempdir().unwrap();
    let child = Crashable::start("hold_raw_db", dir.path());
    let error = RocksStore::open(dir.path(), 0, &tuning()).unwrap_err();
    assert!(
        matches!(&error, StoreError::Locked { path, .. } if path.ends_with("task-0/db/LOCK")),
        "{error:?}"
    );
    child.kill();
    assert_eq!(open(dir.path(), 0).outcome, OpenOutcome::Empty);
}
