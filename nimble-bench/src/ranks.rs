//! Starting ranks and being one: what `train --gpus` and `allreduce --gpus` share. A launcher
//! makes an NCCL id (its process runs NCCL's bootstrap root until every rank joined), starts one
//! process of this binary per GPU with the rank's environment, waits for all of them (the first
//! to fail stops the others, which would otherwise wait in NCCL for ever) and reads what each
//! wrote. A rank reads its environment and joins.
//!
//! The environment (set by a launcher, or by hand for ranks on other hosts): `NIMBLE_RANK`,
//! `NIMBLE_WORLD_SIZE`, `NIMBLE_LOCAL_RANK` (the rank's GPU; default the rank) and
//! `NIMBLE_NCCL_ID` (hex). NVLink multicast stays off: `NCCL_NVLS_ENABLE=0`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use nimble_torch::distributed::{Communicator, NcclId};

/// Starts `gpus` processes of this binary with the arguments `command(out)` gives (`out`: where
/// the rank writes its result), waits for all, and returns what each wrote, rank by rank.
pub fn launch(gpus: usize, scratch: &Path, what: &str, command: impl Fn(&Path) -> Vec<String>) -> Result<Vec<String>> {
    let id = NcclId::new()?;
    let exe = std::env::current_exe().context("finding this program to start the ranks")?;
    let outs: Vec<PathBuf> = (0..gpus).map(|r| scratch.join(format!("{what}-{gpus}-{r}.json"))).collect();
    let mut ranks = Vec::new();
    for (rank, out) in outs.iter().enumerate() {
        let child = Command::new(&exe)
            .args(command(out))
            .env("NIMBLE_RANK", rank.to_string())
            .env("NIMBLE_LOCAL_RANK", rank.to_string())
            .env("NIMBLE_WORLD_SIZE", gpus.to_string())
            .env("NIMBLE_NCCL_ID", id.to_hex())
            // NVLink multicast stays off (the lent machines' rule; plain NVLink P2P is used).
            .env("NCCL_NVLS_ENABLE", "0")
            .spawn();
        match child {
            Ok(child) => ranks.push(child),
            Err(e) => {
                stop(&mut ranks);
                return Err(e).with_context(|| format!("starting rank {rank} ({})", exe.display()));
            }
        }
    }
    wait_all(ranks)?;
    outs.iter().enumerate().map(|(rank, out)| nimble_graph::json::read_text(out).with_context(|| format!("reading rank {rank}'s result"))).collect()
}

fn stop(ranks: &mut [Child]) {
    for child in ranks {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Waits for every rank; the first to fail stops the others.
fn wait_all(mut ranks: Vec<Child>) -> Result<()> {
    let mut running: Vec<bool> = vec![true; ranks.len()];
    while running.iter().any(|&r| r) {
        for rank in 0..ranks.len() {
            if !running[rank] {
                continue;
            }
            if let Some(status) = ranks[rank].try_wait()? {
                running[rank] = false;
                if !status.success() {
                    stop(&mut ranks);
                    bail!("rank {rank} failed ({status}); its error is above. The other ranks were stopped");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn env_number(command: &str, name: &str) -> Result<usize> {
    let text = std::env::var(name).with_context(|| format!("{command} runs as one rank of a launcher (`train --gpus`, `allreduce --gpus`), which sets {name}; it is not set"))?;
    text.trim().parse().with_context(|| format!("{name} is `{text}`, expected a number"))
}

/// Joins the group the environment names, as `command` (for the errors).
pub fn join(command: &str) -> Result<Communicator> {
    let (rank, world) = (env_number(command, "NIMBLE_RANK")?, env_number(command, "NIMBLE_WORLD_SIZE")?);
    let device = if std::env::var_os("NIMBLE_LOCAL_RANK").is_some() { env_number(command, "NIMBLE_LOCAL_RANK")? } else { rank };
    let id = NcclId::from_hex(&std::env::var("NIMBLE_NCCL_ID").with_context(|| format!("{command} needs NIMBLE_NCCL_ID (the launcher's NCCL id, hex)"))?)?;
    Ok(Communicator::new(&id, world, rank, device)?)
}
