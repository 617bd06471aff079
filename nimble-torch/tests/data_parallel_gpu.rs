//! GPU test of data parallelism: two ranks, each a process on its own GPU with a batch of
//! `BATCH`, train the whole step (gradient all-reduces captured in each rank's graph) and must
//! match one GPU training on the whole batch of 2 × `BATCH` from the same weights and data, over
//! `STEPS` steps. BatchNorm is per rank, so the reference normalizes each half of the batch on
//! its own (and averages the two halves' losses); parameters are compared, not BatchNorm's
//! running statistics, which each rank keeps for its own half.
//!
//! It runs three times, packing every gradient into its bucket's flat tensor (DDP's way), none
//! (every gradient all-reduced in place) and those below 2 KiB (the small network's BatchNorm
//! parameters, its stem and fully connected weights packed, its two other convolutions' weights
//! in place).
//!
//! The test starts its ranks by running its own binary again (the ranks find their part through
//! the environment). With fewer than two GPUs it prints a notice and passes; with
//! `NIMBLE_REQUIRE_MULTI_GPU=1` it fails instead.
//!
//! A second test needs one GPU: a group of one rank (the reducer packs, all-reduces and hands the
//! optimizer its means, which NCCL leaves as they are) must train as the whole step alone does,
//! under each packing. Without a GPU it prints a notice and passes; with `NIMBLE_REQUIRE_GPU=1`
//! it fails instead.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::rc::Rc;
use std::time::{Duration, Instant};

use nimble_torch::distributed::{Communicator, DataParallel, NcclId};
use nimble_torch::{relative_error, Nimble, Optimizer, PrepareOptions, TrainStep};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};

mod common;
use common::net::Net;

const WORLD: usize = 2;
const BATCH: i64 = 8;
const STEPS: usize = 20;
const LR: f64 = 0.05;
/// As the one-GPU training tests: float32, TF32 convolutions, non-deterministic reductions.
const TOLERANCE: f64 = 5e-3;
const TEST: &str = "two_ranks_train_like_one_gpu_on_the_whole_batch";
/// Which gradients each run packs (`DataParallel::pack_below_bytes`).
const PACKINGS: [(&str, Option<usize>); 3] = [("every gradient packed", None), ("every gradient in place", Some(0)), ("gradients below 2 KiB packed", Some(2048))];

fn sgd() -> Optimizer {
    Optimizer::sgd(LR).momentum(0.9).weight_decay(5e-4)
}

/// The whole batch of every step, made on the CPU so that every process gets the same numbers.
fn global_batches() -> Vec<(Tensor, Tensor)> {
    tch::manual_seed(11);
    (0..STEPS).map(|_| (Tensor::randn([WORLD as i64 * BATCH, 3, 32, 32], (Kind::Float, Device::Cpu)), Tensor::randint(10, [WORLD as i64 * BATCH], (Kind::Int64, Device::Cpu)))).collect()
}

fn network(seed: i64, device: Device) -> (nn::VarStore, Net) {
    tch::manual_seed(seed);
    let vs = nn::VarStore::new(device);
    let net = Net::new(&vs.root(), 0.0);
    (vs, net)
}

/// One rank: its share of every batch, the whole step prepared data parallel.
fn rank_main(rank: usize, pack_below: Option<usize>, out: &Path) {
    let id = NcclId::from_hex(&std::env::var("NIMBLE_NCCL_ID").unwrap()).unwrap();
    let comm = Rc::new(Communicator::new(&id, WORLD, rank, rank).unwrap());
    let device = Device::Cuda(rank);
    tch::Cuda::cudnn_set_benchmark(true);
    // Each rank starts from other weights: prepare must hand every rank rank 0's.
    let (vs, net) = network(rank as i64, device);
    let share = |t: &Tensor| t.narrow(0, rank as i64 * BATCH, BATCH).to(device);
    let data: Vec<(Tensor, Tensor)> = global_batches().iter().map(|(x, y)| (share(x), share(y))).collect();
    let mut nimble = Nimble::new(net);
    let step = TrainStep::new(sgd()).data_parallel(DataParallel::new(comm.clone()).pack_below_bytes(pack_below));
    let report = nimble.prepare_train_step(&[data[0].0.copy()], &data[0].1, PrepareOptions::training(), step).unwrap().clone();
    assert_eq!(report.gradient_buckets, 1, "{report:?}");
    // The step's task graph has the reducer's buckets, and the forward's measured op times.
    let step_graph = nimble.step_graph(&nimble_graph::step::StepOptions::data_parallel()).unwrap();
    assert_eq!(step_graph.buckets.len(), report.gradient_buckets);
    assert!(step_graph.graph.nodes().iter().any(|n| n.duration_us.is_some_and(|d| d > 0.0)));
    let losses: Vec<f64> = data.iter().map(|(x, y)| nimble.train_step(std::slice::from_ref(x), y).unwrap().double_value(&[])).collect();
    std::fs::write(out.join(format!("losses-{rank}.json")), serde_json::to_string(&losses).unwrap()).unwrap();
    vs.save(out.join(format!("vars-{rank}.ot"))).unwrap();
}

/// Waits for every rank; a failed rank stops the others (they would wait in NCCL for ever).
fn wait_all(mut ranks: Vec<Child>, limit: Duration) {
    let started = Instant::now();
    let mut done = vec![false; ranks.len()];
    while done.iter().any(|d| !d) {
        for (r, child) in ranks.iter_mut().enumerate() {
            if done[r] {
                continue;
            }
            if let Some(status) = child.try_wait().unwrap() {
                done[r] = true;
                if !status.success() {
                    ranks.iter_mut().for_each(|c| drop(c.kill()));
                    panic!("rank {r} failed ({status}); see its output above");
                }
            }
        }
        if started.elapsed() > limit {
            ranks.iter_mut().for_each(|c| drop(c.kill()));
            panic!("the ranks did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One GPU, the whole batch, BatchNorm per half: the reference.
fn reference(data: &[(Tensor, Tensor)]) -> (nn::VarStore, Vec<f64>) {
    let device = Device::Cuda(0);
    let (vs, net) = network(0, device);
    let mut opt = nn::Sgd { momentum: 0.9, dampening: 0.0, wd: 5e-4, nesterov: false }.build(&vs, LR).unwrap();
    let losses = data
        .iter()
        .map(|(x, y)| {
            opt.zero_grad();
            let mut total = 0.0;
            for r in 0..WORLD as i64 {
                let (x, y) = (x.narrow(0, r * BATCH, BATCH).to(device), y.narrow(0, r * BATCH, BATCH).to(device));
                let loss = net.forward_t(&x, true).cross_entropy_for_logits(&y) / WORLD as f64;
                loss.backward();
                total += loss.double_value(&[]);
            }
            opt.step();
            total
        })
        .collect();
    (vs, losses)
}

fn load(path: &Path) -> nn::VarStore {
    let (mut vs, _net) = network(5, Device::Cuda(0));
    vs.load(path).unwrap();
    vs
}

#[test]
fn two_ranks_train_like_one_gpu_on_the_whole_batch() {
    if let Ok(rank) = std::env::var("NIMBLE_TEST_RANK") {
        let pack_below = std::env::var("NIMBLE_TEST_PACK_BELOW").ok().map(|b| b.parse().unwrap());
        return rank_main(rank.parse().unwrap(), pack_below, Path::new(&std::env::var("NIMBLE_TEST_OUT").unwrap()));
    }
    let gpus = nimble_torch::cuda_device_count();
    if gpus < WORLD {
        if std::env::var("NIMBLE_REQUIRE_MULTI_GPU").as_deref() == Ok("1") {
            panic!("NIMBLE_REQUIRE_MULTI_GPU=1 but libtorch sees {gpus} CUDA devices, fewer than {WORLD}");
        }
        eprintln!("notice: {gpus} CUDA devices, fewer than {WORLD}; skipping the data-parallel test (set NIMBLE_REQUIRE_MULTI_GPU=1 to fail instead)");
        return;
    }
    let (expected_vs, expected) = reference(&global_batches());
    assert!(expected[STEPS - 1] < expected[0], "the reference did not lower the loss, so the test proves little");
    for (packing, pack_below) in PACKINGS {
        let out: PathBuf = std::env::temp_dir().join(format!("nimble-data-parallel-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let id = NcclId::new().unwrap();
        let ranks: Vec<Child> = (0..WORLD)
            .map(|rank| {
                let mut command = Command::new(std::env::current_exe().unwrap());
                command
                    .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
                    .env("NIMBLE_TEST_RANK", rank.to_string())
                    .env("NIMBLE_TEST_OUT", &out)
                    .env("NIMBLE_NCCL_ID", id.to_hex())
                    .env("NCCL_NVLS_ENABLE", "0");
                if let Some(bytes) = pack_below {
                    command.env("NIMBLE_TEST_PACK_BELOW", bytes.to_string());
                }
                command.spawn().unwrap()
            })
            .collect();
        wait_all(ranks, Duration::from_secs(300));

        let read = |rank: usize| -> Vec<f64> { serde_json::from_str(&std::fs::read_to_string(out.join(format!("losses-{rank}.json"))).unwrap()).unwrap() };
        let (r0, r1) = (read(0), read(1));
        let losses: Vec<f64> = r0.iter().zip(&r1).map(|(a, b)| (a + b) / 2.0).collect();
        let trained = [load(&out.join("vars-0.ot")), load(&out.join("vars-1.ot"))];
        let _ = std::fs::remove_dir_all(&out);

        let loss_error = losses.iter().zip(&expected).map(|(l, r)| (l - r).abs() / r.abs().max(1e-12)).fold(0.0, f64::max);
        let mut worst = (0.0f64, String::new());
        let (vars0, vars1) = (trained[0].variables(), trained[1].variables());
        for (name, want) in expected_vs.variables() {
            if name.ends_with("running_mean") || name.ends_with("running_var") {
                continue; // BatchNorm's statistics: each rank keeps its own half's
            }
            assert_eq!(relative_error(&vars1[&name], &vars0[&name]), 0.0, "{packing}: {name}: the ranks' parameters differ");
            let error = relative_error(&vars0[&name], &want);
            if error.is_nan() || error > worst.0 {
                worst = (error, name);
            }
        }
        let (worst, name) = worst;
        eprintln!("data parallel over {WORLD} GPUs, {packing}: after {STEPS} steps, largest parameter difference {worst:.2e} ({name}), loss difference {loss_error:.2e}; losses {:.4} → {:.4}", expected[0], expected[STEPS - 1]);
        assert!(worst <= TOLERANCE, "{packing}: parameter {name} differs from one-GPU training by {worst:.2e}");
        assert!(loss_error <= TOLERANCE, "{packing}: losses differ from one-GPU training by {loss_error:.2e}");
    }
}

#[test]
fn a_group_of_one_rank_trains_like_the_step_alone() {
    if std::env::var("NIMBLE_TEST_RANK").is_ok() {
        return; // a rank process of the two-GPU test
    }
    if !tch::Cuda::is_available() {
        if std::env::var("NIMBLE_REQUIRE_GPU").as_deref() == Ok("1") {
            panic!("NIMBLE_REQUIRE_GPU=1 but libtorch sees no CUDA device");
        }
        eprintln!("notice: no CUDA device; skipping the one-rank data-parallel test (set NIMBLE_REQUIRE_GPU=1 to fail instead)");
        return;
    }
    let device = Device::Cuda(0);
    tch::Cuda::cudnn_set_benchmark(true);
    let data: Vec<(Tensor, Tensor)> = global_batches().iter().map(|(x, y)| (x.to(device), y.to(device))).collect();
    let train_with = |optimizer: Optimizer, dp: Option<DataParallel>| {
        let (vs, net) = network(3, device);
        let mut nimble = Nimble::new(net);
        let step = match dp {
            Some(dp) => TrainStep::new(optimizer).data_parallel(dp),
            None => TrainStep::new(optimizer),
        };
        let report = nimble.prepare_train_step(&[data[0].0.copy()], &data[0].1, PrepareOptions::training(), step).unwrap().clone();
        let losses: Vec<f64> = data.iter().map(|(x, y)| nimble.train_step(std::slice::from_ref(x), y).unwrap().double_value(&[])).collect();
        (vs, losses, report.gradient_buckets)
    };
    // SGD under every packing, and Adam (whose per-parameter step counts each bucket's update
    // advances) with every gradient packed.
    let runs = PACKINGS.iter().map(|&(packing, pack_below)| (packing, pack_below, sgd())).chain([("Adam, every gradient packed", None, Optimizer::adam(1e-3))]);
    for (packing, pack_below, optimizer) in runs {
        let (alone, alone_losses, buckets) = train_with(optimizer.clone(), None);
        assert_eq!(buckets, 0);
        let comm = Rc::new(Communicator::new(&NcclId::new().unwrap(), 1, 0, 0).unwrap());
        // Small buckets, so that the step has several and the bucket boundaries are exercised.
        let (vs, losses, buckets) = train_with(optimizer, Some(DataParallel::new(comm).bucket_bytes(8 << 10).first_bucket_bytes(2 << 10).pack_below_bytes(pack_below)));
        assert!(buckets >= 3, "{packing}: {buckets} buckets");
        let loss_error = losses.iter().zip(&alone_losses).map(|(l, r)| (l - r).abs() / r.abs().max(1e-12)).fold(0.0, f64::max);
        let alone_vars = alone.variables();
        let (worst, name) = vs
            .variables()
            .iter()
            .filter(|(name, _)| !name.ends_with("running_mean") && !name.ends_with("running_var"))
            .map(|(name, t)| (relative_error(t, &alone_vars[name]), name.clone()))
            .fold((0.0f64, String::new()), |a, b| if b.0.is_nan() || b.0 > a.0 { b } else { a });
        eprintln!("one rank, {packing}, {buckets} buckets: after {STEPS} steps, largest parameter difference {worst:.2e} ({name}), loss difference {loss_error:.2e}");
        assert!(worst <= TOLERANCE, "{packing}: parameter {name} differs from the step alone by {worst:.2e}");
        assert!(loss_error <= TOLERANCE, "{packing}: losses differ from the step alone by {loss_error:.2e}");
    }
}
