//! The assignment rule: which pod runs each task's active copy and which hold its standbys.
//! Pure and deterministic, so the operator can decide it every few seconds and a new leader
//! decides the same from the same inputs (it never shuffles tasks on takeover).
//!
//! What it guarantees (each a property test below):
//! - exactly one active per task while any pod is alive;
//! - a standby never on its active's pod, and on another node and zone than the active
//!   whenever the live pods' labels allow it;
//! - sticky: with the same pods, nothing moves; a task moves only when its pod is gone or to
//!   even out the load, and then only to a copy that is caught up (lag within
//!   `acceptable_recovery_lag`, as Kafka Streams' KIP-441 does). Until such a copy exists, the
//!   target pod gets a warm-up standby instead;
//! - balanced: active counts differ by at most one task between pods, once copies are warm;
//! - a lost pod's active tasks go to their warmest copies, and nothing else moves;
//! - held balance (`balance: false`) moves no task that is served, and still warms copies;
//!   a settling task (just promoted) never moves for balance, the others still may;
//! - an active fenced under the document in force gets it again under a newer generation.
//!
//! Speed matters: the operator runs this on the failover path. Tasks whose current copies are
//! still valid are kept without looking at other pods, so a decision after one lost pod costs
//! about the lost pod's tasks times the pod count.

use crate::assignment::document::{AssignmentDocument, TaskAssignment};
use crate::version::Versioned;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

/// A pod that may hold copies now: alive and not being drained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlace {
    pub name: String,
    /// `kubernetes.io/hostname` of the pod's node, when known.
    pub node: Option<String>,
    /// `topology.kubernetes.io/zone` of the pod's node, when known.
    pub zone: Option<String>,
}

/// A copy of a task's state that a pod reports: how far behind the changelog's end it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyLag {
    pub pod: String,
    /// Changelog records the copy has not applied yet.
    pub lag: i64,
}

/// Everything one decision is drawn from.
#[derive(Debug, Clone, Copy)]
pub struct AssignmentInputs<'a> {
    /// Tasks `0..tasks`, one per input partition.
    pub tasks: u32,
    pub pods: &'a [PodPlace],
    /// The copies each task has on live pods, as the workers report them.
    pub copies: &'a BTreeMap<u32, Vec<CopyLag>>,
    /// The document in force; `None` for a new job.
    pub current: Option<&'a AssignmentDocument>,
    pub standby_replicas: u32,
    /// A copy at most this far behind may take over a task that is not failing.
    pub acceptable_recovery_lag: i64,
    /// Whether tasks may move now only to even out the load. When not, nothing moves for
    /// balance, but warm-up copies are still placed where tasks should go: the operator holds
    /// balance just after a failover, so a pod that comes back warm does not take a task
    /// straight back from its new owner (two stalls for one failure).
    pub balance: bool,
    /// Tasks that must not move only for balance now, even when `balance` allows it: each was
    /// just promoted and its new owner has not committed yet. Moving one would be a second
    /// stall for one failure and leave its promotion unmeasured; an idle task holds only
    /// itself, not the whole job's balance.
    pub settling: &'a BTreeSet<u32>,
    /// The newest generation any worker has recorded. A job without a document in force (its
    /// stored one was deleted or does not parse) starts above it: a worker never acts on an
    /// older generation than one it has recorded.
    pub newest_recorded_generation: u64,
    /// Tasks whose active under the document in force reports it was fenced under that very
    /// generation: a worker acting on an older document claimed the task (one that restarted
    /// while no operator led, or a retry that took a fence for a timeout). The owner waits as a
    /// standby for a newer generation, so the document is issued again under one, unchanged.
    pub fenced_actives: &'a BTreeSet<u32>,
}

/// No generation is left above the current one: a worker acts only on a newer generation, so
/// the same number again would be refused (or, worse, taken for the document it already has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "assignment generation {0} is the last one: no newer document can be issued; delete the job's assignment ConfigMap and restart its pods to start again from 1"
)]
pub struct GenerationsExhausted(pub u64);

/// The next assignment. Its generation is the current one when nothing changed, and one more
/// when anything did or an active was fenced under it; and always above any generation a worker
/// recorded, which only a lost stored document leaves behind. Refused when that would pass
/// `u64::MAX`.
pub fn next_assignment(
    inputs: AssignmentInputs<'_>,
) -> Result<AssignmentDocument, GenerationsExhausted> {
    let mut plan = Plan::new(&inputs);
    plan.place_actives(&inputs);
    plan.balance_actives(&inputs);
    plan.place_standbys(&inputs);
    let tasks = plan.into_tasks(&inputs);
    let recorded = inputs.newest_recorded_generation;
    let generation = match inputs.current {
        Some(current)
            if current.tasks == tasks
                && current.generation >= recorded
                && inputs.fenced_actives.is_empty() =>
        {
            current.generation
        }
        Some(current) => {
            let newest = current.generation.max(recorded);
            newest.checked_add(1).ok_or(GenerationsExhausted(newest))?
        }
        None => recorded
            .checked_add(1)
            .ok_or(GenerationsExhausted(recorded))?,
    };
    Ok(AssignmentDocument {
        version: AssignmentDocument::VERSION,
        generation,
        tasks,
    })
}

/// How a candidate pod for a standby ranks, best first: farthest from the active, already
/// holding the copy, fewest standbys of the same active pod's tasks, warmest, least loaded.
type StandbyRank = (Proximity, bool, usize, i64, usize, usize);

/// How close a standby sits to its active: further is safer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Proximity {
    OtherZone,
    SameZone,
    SameNode,
}

/// The decision being made, with pods as indices into `inputs.pods`.
struct Plan {
    index: HashMap<String, usize>,
    /// Each pod's zone and node as numbers, so comparing places costs no string compare.
    places: Vec<Place>,
    active: Vec<Option<usize>>,
    standbys: Vec<Vec<usize>>,
    /// Extra standbys placed where a task should move once the copy is warm.
    warm_ups: Vec<Vec<usize>>,
    active_load: Vec<usize>,
    standby_load: Vec<usize>,
    /// Lag of each task's copy per pod.
    lag: Vec<HashMap<usize, i64>>,
}

impl Plan {
    fn new(inputs: &AssignmentInputs<'_>) -> Self {
        let tasks = inputs.tasks as usize;
        let index: HashMap<String, usize> = inputs
            .pods
            .iter()
            .enumerate()
            .map(|(i, pod)| (pod.name.clone(), i))
            .collect();
        let mut lag = vec![HashMap::new(); tasks];
        for (task, copies) in inputs.copies.range(..inputs.tasks) {
            for copy in copies {
                if let Some(&pod) = index.get(&copy.pod) {
                    lag[*task as usize].insert(pod, copy.lag.max(0));
                }
            }
        }
        let mut plan = Self {
            active: vec![None; tasks],
            standbys: vec![Vec::new(); tasks],
            warm_ups: vec![Vec::new(); tasks],
            active_load: vec![0; inputs.pods.len()],
            standby_load: vec![0; inputs.pods.len()],
            lag,
            index,
            places: places(inputs.pods),
        };
        plan.keep_current(inputs);
        plan
    }

    /// Starts from the document in force, minus every copy on a pod that is gone.
    fn keep_current(&mut self, inputs: &AssignmentInputs<'_>) {
        let Some(current) = inputs.current else {
            return;
        };
        for assignment in &current.tasks {
            let task = assignment.task as usize;
            if task >= self.active.len() {
                continue;
            }
            let live = |name: &String| self.index.get(name).copied();
            self.active[task] = assignment.active.as_ref().and_then(live);
            self.standbys[task] = assignment
                .standbys
                .iter()
                .filter_map(live)
                .filter(|pod| Some(*pod) != self.active[task])
                .collect();
        }
        for task in 0..self.active.len() {
            if let Some(pod) = self.active[task] {
                self.active_load[pod] += 1;
            }
            for &pod in &self.standbys[task] {
                self.standby_load[pod] += 1;
            }
        }
    }

    /// The most actives a pod should run when every pod runs its share.
    fn cap(&self) -> usize {
        let pods = self.active_load.len().max(1);
        self.active.len().div_ceil(pods)
    }

    fn caught_up(&self, inputs: &AssignmentInputs<'_>, task: usize, pod: usize) -> bool {
        self.lag[task]
            .get(&pod)
            .is_some_and(|lag| *lag <= inputs.acceptable_recovery_lag)
    }

    /// Gives every task without a live active one: its warmest copy (a caught-up one on a pod
    /// below its share first), or the least loaded pod when no copy exists (a cold start).
    fn place_actives(&mut self, inputs: &AssignmentInputs<'_>) {
        if inputs.pods.is_empty() {
            return;
        }
        let cap = self.cap();
        // Pods by load, least first; an entry whose loads changed since is stale and skipped
        // (every change pushes a fresh one).
        let mut by_load: BinaryHeap<Reverse<(usize, usize, usize)>> = (0..self.active_load.len())
            .map(|pod| Reverse(self.loads(pod)))
            .collect();
        for task in 0..self.active.len() {
            if self.active[task].is_some() {
                continue;
            }
            let warmest = self.lag[task]
                .iter()
                .map(|(&pod, &lag)| {
                    let behind = !self.caught_up(inputs, task, pod);
                    let full = self.active_load[pod] >= cap;
                    ((behind, full, lag, self.active_load[pod], pod), pod)
                })
                .min()
                .map(|(_, pod)| pod);
            let pod = match warmest {
                Some(pod) => pod,
                None => loop {
                    let Some(Reverse(entry)) = by_load.pop() else {
                        return;
                    };
                    if entry == self.loads(entry.2) {
                        break entry.2;
                    }
                },
            };
            self.set_active(task, pod);
            by_load.push(Reverse(self.loads(pod)));
        }
    }

    /// A pod's active and standby counts, and the pod: the order cold tasks fill pods in.
    fn loads(&self, pod: usize) -> (usize, usize, usize) {
        (self.active_load[pod], self.standby_load[pod], pod)
    }

    fn set_active(&mut self, task: usize, pod: usize) {
        if let Some(old) = self.active[task].replace(pod) {
            self.active_load[old] -= 1;
        }
        self.active_load[pod] += 1;
        if let Some(at) = self.standbys[task].iter().position(|p| *p == pod) {
            self.standbys[task].remove(at);
            self.standby_load[pod] -= 1;
        }
    }

    /// Evens out the active counts: a task moves from the busiest pod to a pod at least two
    /// below it, only where a caught-up copy waits. When none does, the least busy pod warms up
    /// a copy of one of the busy pod's tasks, the move is counted as planned, and a later
    /// decision makes it once the copy has caught up. Only a task its owner already serves
    /// (its copy there reports no lag) moves: one still being taken over waits, so a task is
    /// never handed on before its last move finished (each move is a stall).
    fn balance_actives(&mut self, inputs: &AssignmentInputs<'_>) {
        let pods = self.active_load.len();
        if pods < 2 {
            return;
        }
        // Active counts with the planned moves made.
        let mut load: Vec<usize> = self.active_load.clone();
        loop {
            let quietest = (0..pods).min_by_key(|&p| (load[p], p)).unwrap_or(0);
            // The busiest pod with a task that may move: one whose tasks are all still being
            // taken over (or settling) leaves the next busiest to even out meanwhile.
            let mut busy: Vec<usize> = (0..pods)
                .filter(|&p| load[p] > load[quietest] + 1)
                .collect();
            busy.sort_by_key(|&p| (Reverse(load[p]), p));
            let Some((busiest, serving)) = busy.into_iter().find_map(|pod| {
                let movable = self.movable_tasks_on(inputs, pod);
                (!movable.is_empty()).then_some((pod, movable))
            }) else {
                return;
            };
            let limit = load[busiest] - 2;
            let warm_move = serving
                .iter()
                .copied()
                .filter(|_| inputs.balance)
                .find_map(|task| {
                    self.lag[task]
                        .keys()
                        .copied()
                        .filter(|&pod| pod != busiest && load[pod] <= limit)
                        .filter(|&pod| self.caught_up(inputs, task, pod))
                        .min_by_key(|&pod| (load[pod], pod))
                        .map(|pod| (task, pod))
                });
            let target = match warm_move {
                Some((task, pod)) => {
                    self.set_active(task, pod);
                    self.standbys[task].push(busiest);
                    self.standby_load[busiest] += 1;
                    pod
                }
                None => {
                    self.warm_up(&serving, quietest);
                    quietest
                }
            };
            load[busiest] -= 1;
            load[target] += 1;
        }
    }

    /// The tasks on `pod` that may move for balance: served there (no lag) and not settling.
    fn movable_tasks_on(&self, inputs: &AssignmentInputs<'_>, pod: usize) -> Vec<usize> {
        self.tasks_on(pod)
            .into_iter()
            .filter(|&task| self.lag[task].get(&pod) == Some(&0))
            .filter(|&task| {
                u32::try_from(task).map_or(true, |task| !inputs.settling.contains(&task))
            })
            .collect()
    }

    fn tasks_on(&self, pod: usize) -> Vec<usize> {
        (0..self.active.len())
            .filter(|&task| self.active[task] == Some(pod))
            .collect()
    }

    /// Warms a copy on `to` of one of `tasks`: the one `to` is furthest along with, unless
    /// `to` already holds a copy of one of them, which then keeps warming.
    fn warm_up(&mut self, tasks: &[usize], to: usize) {
        let already = tasks
            .iter()
            .copied()
            .find(|&task| self.warm_ups[task].contains(&to) || self.standbys[task].contains(&to));
        let chosen = already.or_else(|| {
            tasks
                .iter()
                .copied()
                .min_by_key(|&task| (self.lag[task].get(&to).copied().unwrap_or(i64::MAX), task))
        });
        if let Some(task) = chosen
            && !self.warm_ups[task].contains(&to)
        {
            self.warm_ups[task].push(to);
        }
    }

    /// Gives every task `standby_replicas` standbys (fewer when there are not enough pods),
    /// each as far from the active as the labels allow; current standbys are kept when they
    /// are as far as any free pod would be, then the warmest copies and the least loaded pods
    /// are preferred, and a pod rarely holds two standbys for the same active pod's tasks, so
    /// a lost pod's tasks fail over to different pods.
    fn place_standbys(&mut self, inputs: &AssignmentInputs<'_>) {
        let tasks = self.active.len();
        let wanted = (inputs.standby_replicas as usize).min(inputs.pods.len().saturating_sub(1));
        if wanted == 0 {
            for task in 0..tasks {
                self.standbys[task] = std::mem::take(&mut self.warm_ups[task]);
            }
            return;
        }
        let farthest = farthest_possible(&self.places);
        // The standbys each pod's actives have, by pod (with repeats).
        let mut pairs: Vec<Vec<usize>> = vec![Vec::new(); self.active_load.len()];
        for task in 0..tasks {
            if let Some(active) = self.active[task] {
                pairs[active].extend(&self.standbys[task]);
            }
        }
        let mut scratch = vec![0usize; self.active_load.len()];
        for task in 0..tasks {
            let Some(active) = self.active[task] else {
                continue;
            };
            if self.standbys_stay(task, active, wanted, farthest[active]) {
                continue;
            }
            for &pod in &self.standbys[task] {
                self.standby_load[pod] -= 1;
                if let Some(at) = pairs[active].iter().position(|p| *p == pod) {
                    pairs[active].swap_remove(at);
                }
            }
            for &pod in &pairs[active] {
                scratch[pod] += 1;
            }
            let chosen = self.choose_standbys(task, active, wanted, &scratch);
            for &pod in &pairs[active] {
                scratch[pod] = 0;
            }
            for &pod in &chosen {
                self.standby_load[pod] += 1;
            }
            pairs[active].extend(&chosen);
            self.standbys[task] = chosen;
        }
    }

    /// The current standbys stay as they are: as many as wanted, none warming up, each as far
    /// from the active as any pod can be.
    fn standbys_stay(
        &self,
        task: usize,
        active: usize,
        wanted: usize,
        farthest: Proximity,
    ) -> bool {
        let current = &self.standbys[task];
        current.len() == wanted
            && self.warm_ups[task].is_empty()
            && current
                .iter()
                .all(|&pod| proximity(&self.places, active, pod) <= farthest)
    }

    /// The `wanted` best pods for `task`'s standbys; `pairs[pod]`: how many standbys of the
    /// active pod's other tasks `pod` holds already.
    fn choose_standbys(
        &self,
        task: usize,
        active: usize,
        wanted: usize,
        pairs: &[usize],
    ) -> Vec<usize> {
        // One pass keeping the best `wanted` (a handful) in order: no sort of every pod.
        let mut best: Vec<(StandbyRank, usize)> = Vec::with_capacity(wanted + 1);
        let (lags, standbys, warm_ups) =
            (&self.lag[task], &self.standbys[task], &self.warm_ups[task]);
        for pod in (0..self.places.len()).filter(|&pod| pod != active) {
            let distance = proximity(&self.places, active, pod);
            if best.len() == wanted && best.last().is_some_and(|(worst, _)| distance > worst.0) {
                continue;
            }
            let kept = standbys.contains(&pod) || warm_ups.contains(&pod);
            let lag = if lags.is_empty() {
                i64::MAX
            } else {
                lags.get(&pod).copied().unwrap_or(i64::MAX)
            };
            let rank = (
                distance,
                !kept,
                pairs[pod],
                lag,
                self.standby_load[pod],
                pod,
            );
            if best.len() == wanted && best.last().is_some_and(|(worst, _)| rank >= *worst) {
                continue;
            }
            let at = best.partition_point(|(other, _)| *other < rank);
            best.insert(at, (rank, pod));
            best.truncate(wanted);
        }
        let mut chosen: Vec<usize> = best.into_iter().map(|(_, pod)| pod).collect();
        // A warm-up copy is kept beside the standbys until the move it prepares is made.
        for &pod in &self.warm_ups[task] {
            if pod != active && !chosen.contains(&pod) {
                chosen.push(pod);
            }
        }
        chosen
    }

    fn into_tasks(self, inputs: &AssignmentInputs<'_>) -> Vec<TaskAssignment> {
        let name = |pod: usize| inputs.pods[pod].name.clone();
        (0..self.active.len())
            .map(|task| {
                let mut standbys: Vec<String> =
                    self.standbys[task].iter().map(|&p| name(p)).collect();
                standbys.sort();
                TaskAssignment {
                    task: u32::try_from(task).unwrap_or(u32::MAX),
                    active: self.active[task].map(name),
                    standbys,
                }
            })
            .collect()
    }
}

/// A pod's zone and node, numbered in the order they first appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    zone: Option<usize>,
    node: Option<usize>,
}

fn places(pods: &[PodPlace]) -> Vec<Place> {
    fn number<'a>(labels: &mut HashMap<&'a str, usize>, label: Option<&'a str>) -> Option<usize> {
        label.map(|label| {
            let next = labels.len();
            *labels.entry(label).or_insert(next)
        })
    }
    let mut zones = HashMap::new();
    let mut nodes = HashMap::new();
    pods.iter()
        .map(|pod| Place {
            zone: number(&mut zones, pod.zone.as_deref()),
            node: number(&mut nodes, pod.node.as_deref()),
        })
        .collect()
}

fn proximity(places: &[Place], a: usize, b: usize) -> Proximity {
    between(places[a], places[b])
}

fn between(a: Place, b: Place) -> Proximity {
    if a.node.is_some() && a.node == b.node {
        Proximity::SameNode
    } else if a.zone.is_some() && a.zone == b.zone {
        Proximity::SameZone
    } else {
        Proximity::OtherZone
    }
}

/// For each pod, the farthest another pod is from it. Pods are grouped by place first, so
/// this costs the pod count times the number of distinct places, not the pod count squared.
fn farthest_possible(places: &[Place]) -> Vec<Proximity> {
    let mut counts: BTreeMap<Place, usize> = BTreeMap::new();
    for place in places {
        *counts.entry(*place).or_default() += 1;
    }
    places
        .iter()
        .map(|own| {
            counts
                .iter()
                // The pod itself does not count among the others of its own place.
                .filter(|(place, count)| *place != own || **count > 1)
                .map(|(place, _)| between(*own, *place))
                .min()
                .unwrap_or(Proximity::SameNode)
        })
        .collect()
}

#[cfg(test)]
#[path = "rule_tests.rs"]
mod tests;
