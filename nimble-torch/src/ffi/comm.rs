//! NCCL communicators, the eager collectives prepare needs, and the gradient reducer a
//! data-parallel whole step captures (`shim/comm.cpp`).

use std::ffi::{c_int, c_longlong, c_void};
use std::ptr;

use tch::Tensor;

use super::{check, tensor_ptrs};
use crate::error::{NimbleError, Result};

/// Bytes of an NCCL unique id (`NCCL_UNIQUE_ID_BYTES`).
pub(crate) const UNIQUE_ID_BYTES: usize = 128;

extern "C" {
    fn ns_nccl_version(out: *mut c_int) -> c_int;
    fn ns_nccl_unique_id(out: *mut u8, n: c_int) -> c_int;
    fn ns_comm_new(id: *const u8, n: c_int, world: c_int, rank: c_int, device: c_int, out: *mut *mut c_void) -> c_int;
    fn ns_comm_free(comm: *mut c_void);
    fn ns_comm_broadcast(comm: *mut c_void, tensors: *const *mut c_void, n: c_int, root: c_int) -> c_int;
    fn ns_comm_all_gather_i64(comm: *mut c_void, mine: *const i64, n: c_int, all: *mut i64) -> c_int;
    fn ns_comm_all_reduce_mean(comm: *mut c_void, tensors: *const *mut c_void, n: c_int) -> c_int;
    fn ns_reducer_new(comm: *mut c_void, params: *const *mut c_void, n: c_int, bucket_of: *const c_int, n_buckets: c_int, high_priority: c_int, pack_below: c_longlong, out: *mut *mut c_void) -> c_int;
    fn ns_reducer_free(reducer: *mut c_void);
    fn ns_reducer_arm(reducer: *mut c_void) -> c_int;
    fn ns_reducer_finish(reducer: *mut c_void) -> c_int;
    fn ns_reducer_wait(reducer: *mut c_void, bucket: c_int) -> c_int;
}

/// The NCCL version libtorch's CUDA build loaded, as NCCL encodes it (2.28.9: 22809).
pub(crate) fn nccl_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: writes one int.
    check("nccl_version", unsafe { ns_nccl_version(&mut version) })?;
    Ok(version)
}

/// A fresh NCCL unique id; this process runs NCCL's bootstrap root until every rank joined.
pub(crate) fn nccl_unique_id() -> Result<[u8; UNIQUE_ID_BYTES]> {
    let mut id = [0u8; UNIQUE_ID_BYTES];
    // SAFETY: the shim writes exactly UNIQUE_ID_BYTES bytes, the length it is told and checks.
    check("nccl_unique_id", unsafe { ns_nccl_unique_id(id.as_mut_ptr(), UNIQUE_ID_BYTES as c_int) })?;
    Ok(id)
}

/// One rank's NCCL communicator.
pub(crate) struct RawComm {
    raw: *mut c_void,
}

impl RawComm {
    /// Joins the communicator `id` of `world` ranks as `rank` on GPU `device`; blocks until every
    /// rank has joined.
    pub(crate) fn new(id: &[u8; UNIQUE_ID_BYTES], world: usize, rank: usize, device: usize) -> Result<RawComm> {
        let mut raw = ptr::null_mut();
        // SAFETY: the id is UNIQUE_ID_BYTES long; on success the shim writes a handle we own.
        check("nccl_comm_init", unsafe { ns_comm_new(id.as_ptr(), UNIQUE_ID_BYTES as c_int, world as c_int, rank as c_int, device as c_int, &mut raw) })?;
        Ok(RawComm { raw })
    }

    /// Copies rank `root`'s tensors into every rank's; returns when done.
    pub(crate) fn broadcast(&self, tensors: &[Tensor], root: usize) -> Result<()> {
        let ts = tensor_ptrs(tensors);
        // SAFETY: a live handle and live tensors for the call.
        check("nccl_broadcast", unsafe { ns_comm_broadcast(self.raw, ts.as_ptr(), ts.len() as c_int, root as c_int) })
    }

    /// Every rank's `mine` (each rank passing the same length), rank by rank.
    pub(crate) fn all_gather(&self, mine: &[i64], world: usize) -> Result<Vec<i64>> {
        let mut all = vec![0i64; mine.len() * world];
        // SAFETY: `all` has room for world × mine.len() integers, what the shim writes.
        check("nccl_all_gather", unsafe { ns_comm_all_gather_i64(self.raw, mine.as_ptr(), mine.len() as c_int, all.as_mut_ptr()) })?;
        Ok(all)
    }

    /// Replaces each tensor by its mean over the ranks, on the current stream.
    pub(crate) fn all_reduce_mean(&self, tensors: &[Tensor]) -> Result<()> {
        let ts = tensor_ptrs(tensors);
        // SAFETY: a live handle and live tensors for the call.
        check("nccl_all_reduce", unsafe { ns_comm_all_reduce_mean(self.raw, ts.as_ptr(), ts.len() as c_int) })
    }
}

impl Drop for RawComm {
    fn drop(&mut self) {
        // SAFETY: made by ns_comm_new, freed once.
        unsafe { ns_comm_free(self.raw) }
    }
}

/// The gradient reducer of a data-parallel step: hooks on the parameters that launch each
/// bucket's all-reduce as its gradients become ready.
pub(crate) struct Reducer {
    raw: *mut c_void,
}

impl Reducer {
    /// `bucket_of[i]`: parameter i's bucket (launch order), or `None` when it is not reduced.
    /// The communicator must outlive the reducer. The all-reduces run on a stream of high
    /// priority, or of normal priority like the compute's. Gradients of fewer than `pack_below`
    /// bytes (all of them when `None`) are packed into one all-reduce per bucket; larger ones are
    /// all-reduced in place, in the same NCCL group.
    pub(crate) fn new(comm: &RawComm, params: &[Tensor], bucket_of: &[Option<usize>], high_priority: bool, pack_below: Option<usize>) -> Result<Reducer> {
        if params.len() != bucket_of.len() {
            return Err(NimbleError::Internal(format!("reducer: {} parameters but {} bucket numbers", params.len(), bucket_of.len())));
        }
        let ps = tensor_ptrs(params);
        let buckets: Vec<c_int> = bucket_of.iter().map(|b| b.map_or(-1, |b| b as c_int)).collect();
        let n_buckets = bucket_of.iter().flatten().max().map_or(0, |b| b + 1);
        let pack_below: c_longlong = pack_below.map_or(-1, |b| b.min(i64::MAX as usize) as c_longlong);
        let mut raw = ptr::null_mut();
        // SAFETY: as many bucket numbers as parameters (checked above; the shim checks their range); live
        // tensors; on success the shim writes a handle we own.
        check("reducer_new", unsafe { ns_reducer_new(comm.raw, ps.as_ptr(), ps.len() as c_int, buckets.as_ptr(), n_buckets as c_int, high_priority as c_int, pack_below, &mut raw) })?;
        Ok(Reducer { raw })
    }

    /// Starts a step's backward.
    pub(crate) fn arm(&self) -> Result<()> {
        // SAFETY: a live handle.
        check("reducer_arm", unsafe { ns_reducer_arm(self.raw) })
    }

    /// Ends a step's backward: launches the rest of the buckets (nothing waits for them yet).
    pub(crate) fn finish(&self) -> Result<()> {
        // SAFETY: a live handle.
        check("reducer_finish", unsafe { ns_reducer_finish(self.raw) })
    }

    /// After `finish`: the current stream waits for bucket `bucket`'s all-reduce (and so for
    /// every earlier bucket's).
    pub(crate) fn wait(&self, bucket: usize) -> Result<()> {
        let bucket = c_int::try_from(bucket).map_err(|_| NimbleError::Internal(format!("bucket {bucket} does not fit a C int")))?;
        // SAFETY: a live handle; the shim checks the bucket's range.
        check("reducer_wait", unsafe { ns_reducer_wait(self.raw, bucket) })
    }
}

impl Drop for Reducer {
    fn drop(&mut self) {
        // SAFETY: made by ns_reducer_new, freed once (it removes its hooks).
        unsafe { ns_reducer_free(self.raw) }
    }
}
