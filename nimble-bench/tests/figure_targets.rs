//! Figures are written as every file the CLI writes: into a symbolic link's target (the link
//! stays), into a FIFO (its reader gets the whole figure), over a file keeping its mode, and two
//! renders at once into one directory each leave one complete figure; no temporary is left.
#![cfg(not(feature = "torch"))] // rendering needs no libtorch: run in the build without it

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::{nimble_bench, scratch, stdout};

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

fn render(directory: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_nimble-bench"))
        .args(["algorithm-example", "--out-dir", directory.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs")
}

/// One complete PNG: the signature, and the IEND chunk last.
fn complete_png(bytes: &[u8]) -> bool {
    bytes.starts_with(PNG_MAGIC) && bytes.ends_with(b"IEND\xae\x42\x60\x82")
}

fn leftovers(directory: &Path) -> Vec<String> {
    std::fs::read_dir(directory).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with('.')).collect()
}

#[test]
fn figures_honour_links_fifos_and_modes_and_leave_no_temporary() {
    let directory = scratch("figure-targets");
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    let elsewhere = scratch("figure-targets-elsewhere");
    let _ = std::fs::remove_dir_all(&elsewhere);
    std::fs::create_dir_all(&elsewhere).unwrap();
    // The SVG through a link to another directory, the PNG into a FIFO with a reader, first.
    std::os::unix::fs::symlink(elsewhere.join("drawn.svg"), directory.join("algorithm-example.svg")).unwrap();
    let fifo = directory.join("algorithm-example.png");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let (sender, received) = std::sync::mpsc::channel();
    {
        let fifo = fifo.clone();
        std::thread::spawn(move || sender.send(std::fs::read(fifo).unwrap()));
    }
    stdout(&nimble_bench(&["algorithm-example", "--out-dir", directory.to_str().unwrap()]));
    // (A figure renamed over the FIFO would leave its reader waiting: a failure, not a hang.)
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
    let bytes = received.recv_timeout(std::time::Duration::from_secs(60)).expect("the FIFO's reader got the figure");
    assert!(complete_png(&bytes), "the FIFO's reader got no complete PNG");
    assert!(std::fs::symlink_metadata(directory.join("algorithm-example.svg")).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(elsewhere.join("drawn.svg")).unwrap().trim_end().ends_with("</svg>"));
    assert!(leftovers(&directory).is_empty() && leftovers(&elsewhere).is_empty(), "{:?} {:?}", leftovers(&directory), leftovers(&elsewhere));

    // Over files of mode 600: the figures replace them and keep the mode.
    let plain = scratch("figure-targets-plain");
    let _ = std::fs::remove_dir_all(&plain);
    std::fs::create_dir_all(&plain).unwrap();
    for name in ["algorithm-example.svg", "algorithm-example.png"] {
        std::fs::write(plain.join(name), "old").unwrap();
        std::fs::set_permissions(plain.join(name), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    stdout(&nimble_bench(&["algorithm-example", "--out-dir", plain.to_str().unwrap()]));
    for name in ["algorithm-example.svg", "algorithm-example.png"] {
        assert_eq!(std::fs::metadata(plain.join(name)).unwrap().permissions().mode() & 0o777, 0o600, "{name}");
    }
    assert!(complete_png(&std::fs::read(plain.join("algorithm-example.png")).unwrap()));

    // Two renders at once into one directory, several times: each ends as one complete figure.
    for _ in 0..4 {
        let (a, b) = (render(&plain), render(&plain));
        for child in [a, b] {
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        }
        assert!(complete_png(&std::fs::read(plain.join("algorithm-example.png")).unwrap()));
        assert!(std::fs::read_to_string(plain.join("algorithm-example.svg")).unwrap().trim_end().ends_with("</svg>"));
        assert!(leftovers(&plain).is_empty(), "{:?}", leftovers(&plain));
    }
}
