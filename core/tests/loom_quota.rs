//! Loom models of `tensorwasm_core::quota`: every interleaving of racing
//! reservations, commits, drops and growth on one tenant's ledger. Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p
//! tensorwasm-core --test loom_quota --release` (docs/testing.md).
//! `QuotaLedger` takes its atomics and `Arc` from `core::sync`, so these are
//! loom's: the models check the real compare-exchange loop. loom also fails
//! a model that ends with a `loom::sync::Arc` alive, so a guard that never
//! dropped its ledger would show.

#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use tensorwasm_core::quota::{OwnedCharge, QuotaLedger, Resource, TenantQuota};

const R: Resource = Resource::DeviceBytes;

fn ledger_with_cap(cap: u64) -> Arc<QuotaLedger> {
    Arc::new(QuotaLedger::new(
        TenantQuota::unlimited().with_limit(R, cap),
    ))
}

/// Spawns one thread per request; each tries to reserve `amount` and, on
/// success, commits and hands the charge back (so it is still held when the
/// other threads try). Returns the charges that were granted.
fn race_reservations(ledger: &Arc<QuotaLedger>, amounts: &[u64]) -> Vec<OwnedCharge> {
    let racers: Vec<_> = amounts
        .iter()
        .map(|&amount| {
            let ledger = Arc::clone(ledger);
            thread::spawn(move || {
                let granted = QuotaLedger::try_reserve_owned(&ledger, R, amount).ok();
                granted.map(|r| r.commit())
            })
        })
        .collect();
    racers
        .into_iter()
        .filter_map(|r| r.join().unwrap())
        .collect()
}

/// (a) Two requests of 3 against a cap of 4: only one fits, and in every
/// interleaving exactly one is granted (a check-then-add would let both
/// pass when both read 0 before either adds).
#[test]
fn two_racing_reservations_never_pass_a_cap_that_fits_one() {
    loom::model(|| {
        let cap = 4;
        let ledger = ledger_with_cap(cap);
        let granted = race_reservations(&ledger, &[3, 3]);

        let sum: u64 = granted.iter().map(OwnedCharge::amount).sum();
        assert_eq!(granted.len(), 1, "exactly one of two fits");
        assert!(sum <= cap);
        assert_eq!(ledger.in_use(R), sum);
        drop(granted);
        assert_eq!(ledger.in_use(R), 0);
        assert_eq!(Arc::strong_count(&ledger), 1);
    });
}

/// (a) Three requests of 2 against a cap of 5: two fit, never three, and
/// never fewer than two (a refusal must mean the cap was really reached).
#[test]
fn three_racing_reservations_never_pass_a_cap_that_fits_two() {
    loom::model(|| {
        let cap = 5;
        let ledger = ledger_with_cap(cap);
        let granted = race_reservations(&ledger, &[2, 2, 2]);

        let sum: u64 = granted.iter().map(OwnedCharge::amount).sum();
        assert_eq!(granted.len(), 2, "exactly two of three fit");
        assert!(sum <= cap);
        assert_eq!(ledger.in_use(R), sum);
        drop(granted);
        assert_eq!(ledger.in_use(R), 0);
    });
}

/// (b) No leak: one thread commits its reservation and drops the charge,
/// another drops its reservation uncommitted, a third may be refused while
/// the others hold theirs. Once all are done, nothing is in use and no
/// guard keeps the ledger alive.
#[test]
fn nothing_leaks_after_commits_drops_and_refusals() {
    loom::model(|| {
        let ledger = ledger_with_cap(3);
        let committing = {
            let ledger = Arc::clone(&ledger);
            thread::spawn(move || {
                if let Ok(r) = QuotaLedger::try_reserve_owned(&ledger, R, 2) {
                    let charge = r.commit();
                    assert!(ledger.in_use(R) <= 3);
                    drop(charge);
                }
            })
        };
        let abandoning = {
            let ledger = Arc::clone(&ledger);
            thread::spawn(move || {
                if let Ok(r) = ledger.try_reserve(R, 2) {
                    // Creating the resource "failed": the reservation goes.
                    drop(r);
                }
            })
        };
        // Main takes 1 and keeps it until the others are done, so one of
        // them may be refused on the way.
        let mine = ledger.try_reserve(R, 1).unwrap().commit();
        committing.join().unwrap();
        abandoning.join().unwrap();
        assert_eq!(ledger.in_use(R), 1);
        drop(mine);

        assert_eq!(
            ledger.in_use(R),
            0,
            "every reservation and charge given back"
        );
        assert_eq!(Arc::strong_count(&ledger), 1);
    });
}

/// (c) A charge grows (guest memory grows) while another thread reserves:
/// both want the last 2 units of a cap of 3, so exactly one gets them, and
/// the counter ends at exactly what the winners hold.
#[test]
fn growth_racing_a_reservation_has_one_winner() {
    loom::model(|| {
        let ledger = ledger_with_cap(3);
        let mut memory = QuotaLedger::try_reserve_owned(&ledger, R, 1)
            .unwrap()
            .commit();

        let reserving = {
            let ledger = Arc::clone(&ledger);
            thread::spawn(move || {
                QuotaLedger::try_reserve_owned(&ledger, R, 2)
                    .ok()
                    .map(|r| r.commit())
            })
        };
        let grew = memory.try_grow(2).is_ok();
        let other = reserving.join().unwrap();

        assert!(
            grew != other.is_some(),
            "exactly one of grow and reserve wins"
        );
        let held = memory.amount() + other.as_ref().map_or(0, OwnedCharge::amount);
        assert_eq!(held, 3);
        assert_eq!(ledger.in_use(R), held);
        assert_eq!(memory.amount(), if grew { 3 } else { 1 });

        drop(other);
        drop(memory);
        assert_eq!(ledger.in_use(R), 0);
        assert_eq!(Arc::strong_count(&ledger), 1);
    });
}
