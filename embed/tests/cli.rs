//! `tensorwasm devices` end to end: the real binary, as a user runs it.

use std::process::Command;

fn tensorwasm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tensorwasm"))
}

#[test]
fn devices_lists_both_drivers_and_the_auto_choice() {
    let out = tensorwasm()
        .arg("devices")
        .output()
        .expect("run tensorwasm");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("cpu: 1 device(s)"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("cuda: ")), "{text}");
    assert!(text.contains("auto picks: "), "{text}");
}

#[test]
fn missing_libcuda_is_reported_with_its_reason() {
    let out = tensorwasm()
        .arg("devices")
        .env("TENSORWASM_LIBCUDA", "/nonexistent/libcuda.so.1")
        .output()
        .expect("run tensorwasm");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "cuda: unavailable: cannot load the CUDA driver library `/nonexistent/libcuda.so.1`"
        ),
        "{text}"
    );
    assert!(text.ends_with("auto picks: cpu\n"), "{text}");
}

#[test]
fn unknown_commands_fail_with_usage() {
    let out = tensorwasm()
        .arg("frobnicate")
        .output()
        .expect("run tensorwasm");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("unknown command `frobnicate`") && err.contains("usage:"),
        "{err}"
    );
}
