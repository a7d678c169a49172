//! The minimal custom host runs its guest on the driver it finds (the CPU
//! driver in CI; CUDA on a GPU) and says so; bad input is a usage error.

use std::process::Command;

fn host(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tensorwasm-example-host"))
        .args(args)
        .output()
        .expect("the example host runs")
}

#[test]
fn the_host_runs_its_guest_and_every_element_matches() {
    let out = host(&["4099"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("vector add of 4099 floats by raw PTX on ")
            && stdout.ends_with(": all 4099 match\n"),
        "{stdout}"
    );
}

#[test]
fn a_bad_count_is_a_usage_error() {
    for bad in ["0", "-3", "many"] {
        let out = host(&[bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("usage:"));
    }
}
