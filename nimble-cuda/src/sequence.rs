//! The translation of a [`StreamPlan`] into the launch steps an executor issues.
//!
//! Pure data, so it is tested on the CPU; the eager executor and the capture pass both walk the
//! same steps, which is why a captured graph has exactly the plan's structure.

use nimble_sched::StreamPlan;

/// One host-side action of running a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchStep {
    /// Make every plan stream wait on an event recorded on the origin stream, so all the plan's
    /// work is ordered after what came before (and, in a capture, joins the capture).
    Fork,
    /// Before launching on `stream`, wait on the event recorded after node `after`.
    Wait { after: usize, stream: usize },
    /// Launch node `node`'s kernel on `stream`.
    Kernel { node: usize, stream: usize },
    /// Record node `node`'s event on `stream`, right after its kernel.
    Record { node: usize, stream: usize },
    /// Make the origin stream wait on the last work of every plan stream (a capture must end
    /// with every stream joined back into the origin).
    Join,
}

/// The steps of one run of `plan`: fork, then per node in issue order its waits, its kernel and
/// (if any sync starts at it) its event record, then join.
///
/// Syncs whose source is issued after their target would wait on an event not yet recorded;
/// they are reported as an error rather than silently dropped.
pub fn launch_sequence(plan: &StreamPlan) -> Result<Vec<LaunchStep>, String> {
    let n = plan.order.len();
    if plan.stream_of.len() != n {
        return Err(format!("plan has {} stream labels for {n} nodes", plan.stream_of.len()));
    }
    let mut position = vec![usize::MAX; n];
    for (p, &v) in plan.order.iter().enumerate() {
        if v >= n || position[v] != usize::MAX {
            return Err(format!("issue order is not a permutation (node {v})"));
        }
        position[v] = p;
    }
    if let Some(&v) = plan.stream_of.iter().find(|&&s| s >= plan.streams) {
        return Err(format!("stream {v} is beyond the plan's {} streams", plan.streams));
    }
    let mut waits: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut recorded = vec![false; n];
    for &(u, v) in &plan.syncs {
        if u >= n || v >= n || position[u] >= position[v] {
            return Err(format!("sync ({u}, {v}) does not go forward in issue order"));
        }
        waits[v].push(u);
        recorded[u] = true;
    }
    let mut steps = Vec::with_capacity(2 + n + 2 * plan.syncs.len());
    steps.push(LaunchStep::Fork);
    for &v in &plan.order {
        let stream = plan.stream_of[v];
        steps.extend(waits[v].iter().map(|&after| LaunchStep::Wait { after, stream }));
        steps.push(LaunchStep::Kernel { node: v, stream });
        if recorded[v] {
            steps.push(LaunchStep::Record { node: v, stream });
        }
    }
    steps.push(LaunchStep::Join);
    Ok(steps)
}

/// Nodes whose event some sync waits on (they need an event object).
pub fn recorded_nodes(steps: &[LaunchStep]) -> impl Iterator<Item = usize> + '_ {
    steps.iter().filter_map(|step| match *step {
        LaunchStep::Record { node, .. } => Some(node),
        _ => None,
    })
}
