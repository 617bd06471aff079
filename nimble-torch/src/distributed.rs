//! Data parallelism over NCCL: one process per GPU, each a *rank* with its own copy of the model
//! and its own share of every batch, whose gradients are averaged before each optimizer step.
//!
//! ```text
//! launcher   NcclId::new()  (runs NCCL's bootstrap root; stays alive until every rank joined)
//!            hands id.to_hex(), the world size and each rank's number to its process
//! each rank  Communicator::new(&id, world, rank, gpu)        joins; blocks until all have
//!            Nimble::prepare_train_step(.., TrainStep::new(opt).data_parallel(DataParallel::new(comm)))
//!              broadcasts rank 0's parameters and buffers, checks that every rank made the same
//!              buckets, and captures the step with the gradient all-reduces in it
//!            train_step(..) on every rank in lockstep (the graphs meet in their all-reduces)
//! ```
//!
//! NCCL is the engine (libtorch's CUDA build loads it; we call it directly rather than through
//! c10d's ProcessGroupNCCL, whose watchdog and work objects have no place in a captured graph).
//! The launcher may sit on any host: the id carries the address of its bootstrap root, so ranks
//! on other hosts join by being given the same hex string (`NIMBLE_NCCL_ID`).
//!
//! Gradients are reduced in buckets ([`buckets`]): parameters in reverse order of their first use
//! in the forward (roughly the order backward produces their gradients), a new bucket once one
//! holds `bucket_bytes` or the dtype changes, as PyTorch's DDP does. BatchNorm stays per rank
//! (each rank normalizes over its own share of the batch, like DDP without SyncBatchNorm).

use std::rc::Rc;

use nimble_graph::step::bucket_members;
use tch::{Kind, Tensor};

use crate::error::{NimbleError, Result};
use crate::ffi::{self, RawComm, Reducer, UNIQUE_ID_BYTES};

/// PyTorch DDP's default bucket size: 25 MiB.
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;
/// PyTorch DDP's first bucket: 1 MiB, so that the first all-reduce starts early in the backward.
pub const DEFAULT_FIRST_BUCKET_BYTES: usize = 1024 * 1024;
/// Which gradients are packed into their bucket's flat tensor by default: all of them, as DDP.
pub const DEFAULT_PACK_BELOW_BYTES: Option<usize> = None;

/// The name of an NCCL communicator: what every rank is given to join it.
#[derive(Clone, PartialEq, Eq)]
pub struct NcclId([u8; UNIQUE_ID_BYTES]);

impl NcclId {
    /// A fresh id. This process runs NCCL's bootstrap root, so it must live until every rank has
    /// joined (a launcher waiting for its ranks does).
    pub fn new() -> Result<NcclId> {
        Ok(NcclId(ffi::nccl_unique_id()?))
    }

    /// The id as lowercase hex (256 characters), to hand to another process.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// An id from [`NcclId::to_hex`]'s text.
    pub fn from_hex(text: &str) -> Result<NcclId> {
        let text = text.trim();
        let bad = |why: String| NimbleError::InvalidInput(format!("NCCL id: {why}; expected the {} hex digits a launcher printed", 2 * UNIQUE_ID_BYTES));
        if text.len() != 2 * UNIQUE_ID_BYTES {
            return Err(bad(format!("{} characters", text.len())));
        }
        let mut id = [0u8; UNIQUE_ID_BYTES];
        for (i, byte) in id.iter_mut().enumerate() {
            let pair = text.get(2 * i..2 * i + 2).ok_or_else(|| bad("not ASCII".into()))?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| bad(format!("`{pair}` at position {} is not hex", 2 * i)))?;
        }
        Ok(NcclId(id))
    }
}

impl std::fmt::Debug for NcclId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclId({}…)", &self.to_hex()[..16])
    }
}

/// The NCCL version libtorch loaded, as (major, minor, patch).
pub fn nccl_version() -> Result<(u32, u32, u32)> {
    let code = ffi::nccl_version()? as u32;
    Ok((code / 10000, code / 100 % 100, code % 100))
}

/// This process's membership of a group of ranks: an NCCL communicator on one GPU.
pub struct Communicator {
    raw: RawComm,
    world: usize,
    rank: usize,
    device: usize,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Communicator {{ rank {} of {}, cuda:{} }}", self.rank, self.world, self.device)
    }
}

impl Communicator {
    /// Joins the group `id` of `world` ranks as `rank`, on GPU `device`, which becomes this
    /// process's current device. Blocks until every rank has joined.
    pub fn new(id: &NcclId, world: usize, rank: usize, device: usize) -> Result<Communicator> {
        check_rank(world, rank)?;
        let devices = ffi::cuda_device_count()?;
        if devices == 0 {
            return Err(NimbleError::NoCuda);
        }
        if device >= devices {
            return Err(NimbleError::InvalidInput(format!("rank {rank} was given GPU {device}, but this process sees {devices} GPUs (expected one below {devices})")));
        }
        ffi::set_device(device)?;
        let raw = RawComm::new(&id.0, world, rank, device)?;
        Ok(Communicator { raw, world, rank, device })
    }

    pub fn world(&self) -> usize {
        self.world
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    /// This rank's GPU.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Copies `root`'s tensors into every rank's (in place; every rank passes tensors of the
    /// same shapes and types, on its GPU, contiguous); returns when done.
    pub fn broadcast(&self, tensors: &[Tensor], root: usize) -> Result<()> {
        check_rank(self.world, root)?;
        self.raw.broadcast(tensors, root)
    }

    /// Replaces each tensor by its mean over the ranks (in place, on the current stream).
    pub fn all_reduce_mean(&self, tensors: &[Tensor]) -> Result<()> {
        self.raw.all_reduce_mean(tensors)
    }

    /// Fails unless every rank passed the same `mine`, naming the first rank that differs from
    /// rank 0 and `what` the numbers describe. Every rank must call it at the same point.
    pub fn check_same(&self, what: &str, mine: &[i64]) -> Result<()> {
        let lengths = self.raw.all_gather(&[mine.len() as i64], self.world)?;
        let lengths: Vec<Vec<i64>> = lengths.chunks(1).map(<[i64]>::to_vec).collect();
        check_agreement(&format!("the length of {what}"), &lengths)?;
        if mine.is_empty() {
            return Ok(());
        }
        let all = self.raw.all_gather(mine, self.world)?;
        let rows: Vec<Vec<i64>> = all.chunks(mine.len()).map(<[i64]>::to_vec).collect();
        check_agreement(what, &rows)
    }
}

fn check_rank(world: usize, rank: usize) -> Result<()> {
    if world == 0 {
        return Err(NimbleError::InvalidInput("a group of 0 ranks; expected at least one".into()));
    }
    if rank >= world {
        return Err(NimbleError::InvalidInput(format!("rank {rank} in a group of {world}; expected a rank below {world}")));
    }
    Ok(())
}

/// Fails unless every rank's row equals rank 0's, naming the first rank and position that differ.
pub fn check_agreement(what: &str, rows: &[Vec<i64>]) -> Result<()> {
    let Some(first) = rows.first() else { return Ok(()) };
    for (rank, row) in rows.iter().enumerate().skip(1) {
        if row.len() != first.len() {
            return Err(NimbleError::InvalidInput(format!("the ranks disagree on {what}: rank {rank} has {} entries, rank 0 has {}", row.len(), first.len())));
        }
        if let Some(i) = (0..row.len()).find(|&i| row[i] != first[i]) {
            return Err(NimbleError::InvalidInput(format!(
                "the ranks disagree on {what}: entry {i} is {} on rank {rank} and {} on rank 0 (every rank must run the same model, so that they issue the same collectives in the same order)",
                row[i], first[i]
            )));
        }
    }
    Ok(())
}

/// How a whole training step is spread over ranks.
#[derive(Clone)]
pub struct DataParallel {
    pub comm: Rc<Communicator>,
    /// Bytes of gradient per all-reduce (a bucket closes once it holds this many).
    pub bucket_bytes: usize,
    /// The first bucket's (the gradients the backward makes first), at most `bucket_bytes`.
    pub first_bucket_bytes: usize,
    /// Whether the all-reduces' stream has high priority (the default), so the GPU schedules
    /// their blocks ahead of waiting compute blocks.
    pub high_priority: bool,
    /// Gradients of fewer bytes are copied into their bucket's one flat tensor and all-reduced
    /// together; larger ones are all-reduced where they are, in the same NCCL group, so their
    /// bytes are not copied. `None`: every gradient is packed (as PyTorch's DDP does).
    pub pack_below_bytes: Option<usize>,
}

impl std::fmt::Debug for DataParallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataParallel {{ {:?}, bucket_bytes: {}, first_bucket_bytes: {}, high_priority: {}, pack_below_bytes: {:?} }}", self.comm, self.bucket_bytes, self.first_bucket_bytes, self.high_priority, self.pack_below_bytes)
    }
}

impl DataParallel {
    /// Over `comm`, with DDP's buckets: 1 MiB first, then 25 MiB.
    pub fn new(comm: Rc<Communicator>) -> Self {
        DataParallel { comm, bucket_bytes: DEFAULT_BUCKET_BYTES, first_bucket_bytes: DEFAULT_FIRST_BUCKET_BYTES, high_priority: true, pack_below_bytes: DEFAULT_PACK_BELOW_BYTES }
    }

    /// Sets which gradients are packed into their bucket's flat tensor: those of fewer than
    /// `bytes` (`None`: all).
    pub fn pack_below_bytes(mut self, bytes: Option<usize>) -> Self {
        self.pack_below_bytes = bytes;
        self
    }

    /// Replaces the bucket size (the first bucket's too, where it is larger).
    pub fn bucket_bytes(mut self, bytes: usize) -> Self {
        self.bucket_bytes = bytes;
        self.first_bucket_bytes = self.first_bucket_bytes.min(bytes);
        self
    }

    /// Sets the priority of the all-reduces' stream.
    pub fn high_priority(mut self, on: bool) -> Self {
        self.high_priority = on;
        self
    }

    /// Replaces the first bucket's size.
    pub fn first_bucket_bytes(mut self, bytes: usize) -> Self {
        self.first_bucket_bytes = bytes;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.bucket_bytes == 0 || self.first_bucket_bytes == 0 {
            return Err(NimbleError::InvalidInput("a bucket size of 0 bytes; expected at least one byte (DDP's defaults: 1 MiB first, then 25 MiB)".into()));
        }
        Ok(())
    }
}

/// A parameter as bucketing sees it: its size in bytes and its dtype, or `None` when it gets no
/// gradient.
pub type BucketInput = Option<(usize, Kind)>;

/// The bucketing rule (PyTorch DDP's), shared with the task graph of a training step.
pub use nimble_graph::step::buckets;

/// What every rank must agree on before it captures: each bucket's element count, dtype and
/// number of parameters, then every bucketed parameter's element count in order (which of a
/// bucket's gradients are packed and which are all-reduced in place follows from their sizes).
fn fingerprint(params: &[Tensor], bucket_of: &[Option<usize>]) -> Vec<i64> {
    let n = bucket_of.iter().flatten().max().map_or(0, |b| b + 1);
    let mut rows = vec![[0i64; 3]; n];
    let mut sizes = Vec::new();
    for (p, b) in params.iter().zip(bucket_of) {
        if let Some(b) = *b {
            rows[b][0] += p.numel() as i64;
            rows[b][1] = p.kind() as i64;
            rows[b][2] += 1;
            sizes.push(p.numel() as i64);
        }
    }
    std::iter::once(n as i64).chain(rows.into_iter().flatten()).chain(sizes).collect()
}

/// The gradient all-reduces of a prepared data-parallel step, over the parameters that had a
/// gradient after the first warm-up step.
pub(crate) struct GradientSync {
    reducer: Reducer,
    /// The reducer's hooks point into the communicator.
    _comm: Rc<Communicator>,
    /// Each bucket's parameters (indices into the step's parameters), in launch order.
    pub(crate) members: Vec<Vec<usize>>,
    /// The parameters in no bucket (they had no gradient when the buckets were made).
    pub(crate) unbucketed: Vec<usize>,
}

impl GradientSync {
    pub(crate) fn new(dp: &DataParallel, params: &[Tensor]) -> Result<GradientSync> {
        let inputs: Vec<BucketInput> = params.iter().map(|p| p.grad().defined().then(|| (p.numel() * p.kind().elt_size_in_bytes(), p.kind()))).collect();
        let bucket_of = buckets(&inputs, dp.first_bucket_bytes, dp.bucket_bytes);
        dp.comm.check_same("the gradient buckets (count, then elements, dtype and parameters of each, then each gradient's elements)", &fingerprint(params, &bucket_of))?;
        let reducer = Reducer::new(&dp.comm.raw, params, &bucket_of, dp.high_priority, dp.pack_below_bytes)?;
        let (members, unbucketed) = bucket_members(&bucket_of);
        Ok(GradientSync { reducer, _comm: dp.comm.clone(), members, unbucketed })
    }

    pub(crate) fn buckets(&self) -> usize {
        self.members.len()
    }

    /// Before a step's backward.
    pub(crate) fn arm(&self) -> Result<()> {
        self.reducer.arm()
    }

    /// After a step's backward: launches the buckets left (nothing waits for them yet).
    pub(crate) fn finish(&self) -> Result<()> {
        self.reducer.finish()
    }

    /// After `finish`: the current stream then sees bucket `bucket`'s averaged gradients.
    pub(crate) fn wait(&self, bucket: usize) -> Result<()> {
        self.reducer.wait(bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_hex_and_bad_text_is_refused() {
        let id = NcclId(std::array::from_fn(|i| (i * 7) as u8));
        assert_eq!(NcclId::from_hex(&id.to_hex()).unwrap(), id);
        let short = NcclId::from_hex("abc").unwrap_err().to_string();
        assert!(short.contains("3 characters") && short.contains("256 hex digits"), "{short}");
        let text = format!("zz{}", &id.to_hex()[2..]);
        let bad = NcclId::from_hex(&text).unwrap_err().to_string();
        assert!(bad.contains("`zz` at position 0 is not hex"), "{bad}");
        let wide = format!("é{}", &id.to_hex()[2..]);
        assert!(NcclId::from_hex(&wide).is_err());
    }

    #[test]
    fn disagreeing_ranks_are_named() {
        assert!(check_agreement("x", &[vec![1, 2], vec![1, 2], vec![1, 2]]).is_ok());
        let e = check_agreement("the buckets", &[vec![1, 2], vec![1, 2], vec![1, 3]]).unwrap_err().to_string();
        assert!(e.contains("entry 1 is 3 on rank 2 and 2 on rank 0"), "{e}");
        let e = check_agreement("the buckets", &[vec![1, 2], vec![1]]).unwrap_err().to_string();
        assert!(e.contains("rank 1 has 1 entries, rank 0 has 2"), "{e}");
    }

    #[test]
    fn ranks_and_bucket_sizes_out_of_range_are_refused() {
        assert!(check_rank(2, 2).unwrap_err().to_string().contains("rank 2 in a group of 2"));
        assert!(check_rank(0, 0).unwrap_err().to_string().contains("0 ranks"));
        assert!(check_rank(2, 1).is_ok());
    }

    #[test]
    fn the_fingerprint_counts_each_bucket() {
        let params = [Tensor::zeros([3, 2], (Kind::Float, tch::Device::Cpu)), Tensor::zeros([5], (Kind::Float, tch::Device::Cpu))];
        let f = fingerprint(&params, &[Some(0), Some(0)]);
        assert_eq!(f, vec![1, 11, Kind::Float as i64, 2, 6, 5]);
        // The same bucket totals from other sizes differ.
        let other = [Tensor::zeros([4], (Kind::Float, tch::Device::Cpu)), Tensor::zeros([7], (Kind::Float, tch::Device::Cpu))];
        assert_ne!(fingerprint(&other, &[Some(0), Some(0)]), f);
        assert_eq!(fingerprint(&params, &[None, None]), vec![0]);
    }
}
