//! Host side of `modnode:deposits@3.0.0` (`wit/deposits-3`, Electra's pending-deposit queue):
//! the bindings, the host implementation of the `registry` (with `total-active-balance`),
//! `queue` and `crypto` imports on the kind's one store data type, and the typed calls
//! [`Module::process_v3`] and [`Module::process_epoch`]. Every write goes to the call's
//! overlays (registry and queue), which become deltas the caller applies only when the whole
//! call succeeded.

use super::{Deposits, DepositsCtx, NOT_FOUND, registry_error};
use crate::deposit::{
    ChainContext, DepositContext, DepositRejection, EpochDeposits, ProvenDeposit, QueuedDeposits,
};
use crate::runtime::error::{HostFailure, HostFailureKind};
use crate::runtime::module::Module;
use crate::runtime::{CallError, Kind};
use crate::state::{
    PendingDelta, PendingDeposit as HostPending, PendingError, PendingQueue, RegistryDelta,
    SharedRegistry,
};

pub(super) mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/deposits-3"],
        world: "modnode:deposits/deposits",
        additional_derives: [PartialEq, Eq],
        imports: { default: trappable },
    });
}

use bindings::modnode::deposits::{crypto, queue, registry, types};
pub use types::{
    BlockContext as BlockContextV3, Deposit as DepositV3, EpochContext, EpochProcessed,
    Outcome as EpochOutcome, PendingDeposit as WitPendingDeposit, ProcessError as ProcessErrorV3,
    QueueError, Queued, RegistryError as RegistryErrorV3,
};

/// Entries one `queue.read` returns at most (the WIT's bound).
pub const MAX_READ: u32 = 64;

fn registry_result<T>(
    r: Result<T, crate::state::OverlayError>,
) -> wasmtime::Result<Result<T, types::RegistryError>> {
    Ok(r.map_err(|e| to_v3_registry_error(registry_error(&e))))
}

fn to_v3_registry_error(e: super::RegistryError) -> types::RegistryError {
    use super::RegistryError as V2;
    match e {
        V2::DuplicatePubkey => types::RegistryError::DuplicatePubkey,
        V2::BadLength(f) => types::RegistryError::BadLength(f),
        V2::UnknownIndex(i) => types::RegistryError::UnknownIndex(i),
        V2::BalanceOverflow(i) => types::RegistryError::BalanceOverflow(i),
        V2::RegistryFull => types::RegistryError::RegistryFull,
    }
}

fn queue_error(e: &PendingError) -> QueueError {
    match e {
        PendingError::Short { wanted, len } => QueueError::Short((*wanted, *len)),
        _ => QueueError::Full,
    }
}

/// A queue entry as the host stores it; a field of the wrong length is named.
pub fn from_wit(d: &WitPendingDeposit) -> Result<HostPending, QueueError> {
    let bad = |field: &str| QueueError::BadLength(field.to_string());
    Ok(HostPending {
        pubkey: d.pubkey.as_slice().try_into().map_err(|_| bad("pubkey"))?,
        withdrawal_credentials: d
            .withdrawal_credentials
            .as_slice()
            .try_into()
            .map_err(|_| bad("withdrawal-credentials"))?,
        amount: d.amount,
        signature: d
            .signature
            .as_slice()
            .try_into()
            .map_err(|_| bad("signature"))?,
        slot: d.slot,
        height: d.height,
    })
}

/// A stored queue entry as the module sees it.
pub fn to_wit(d: &HostPending) -> WitPendingDeposit {
    WitPendingDeposit {
        pubkey: d.pubkey.to_vec(),
        withdrawal_credentials: d.withdrawal_credentials.to_vec(),
        amount: d.amount,
        signature: d.signature.to_vec(),
        slot: d.slot,
        height: d.height,
    }
}

impl registry::Host for DepositsCtx {
    fn index_of(&mut self, pubkey: Vec<u8>) -> wasmtime::Result<u32> {
        let cost = self.base.fuel().costs().registry_lookup;
        self.base.fuel().charge_call(pubkey.len(), cost)?;
        Ok(self.overlay.index_of(&pubkey).unwrap_or(NOT_FOUND))
    }

    fn validator_count(&mut self) -> wasmtime::Result<u32> {
        self.base.fuel().charge_call(0, 0)?;
        Ok(self.overlay.validator_count())
    }

    fn add_validator(
        &mut self,
        pubkey: Vec<u8>,
        withdrawal_credentials: Vec<u8>,
        effective_balance: u64,
        balance: u64,
    ) -> wasmtime::Result<Result<u32, types::RegistryError>> {
        let cost = self.base.fuel().costs().registry_write;
        let bytes = pubkey.len().saturating_add(withdrawal_credentials.len());
        self.base.fuel().charge_call(bytes, cost)?;
        registry_result(self.overlay.add_validator(
            &pubkey,
            &withdrawal_credentials,
            effective_balance,
            balance,
        ))
    }

    fn increase_balance(
        &mut self,
        index: u32,
        amount: u64,
    ) -> wasmtime::Result<Result<(), types::RegistryError>> {
        let cost = self.base.fuel().costs().registry_write;
        self.base.fuel().charge_call(0, cost)?;
        registry_result(self.overlay.increase_balance(index, amount))
    }

    fn total_active_balance(&mut self) -> wasmtime::Result<u64> {
        self.base.fuel().charge_call(0, 0)?;
        Ok(self.overlay.total_effective_balance())
    }
}

impl queue::Host for DepositsCtx {
    fn push(&mut self, deposit: WitPendingDeposit) -> wasmtime::Result<Result<(), QueueError>> {
        let cost = self.base.fuel().costs().registry_write;
        self.base
            .fuel()
            .charge_call(crate::state::pending::PENDING_DEPOSIT_BYTES, cost)?;
        let entry = match from_wit(&deposit) {
            Ok(entry) => entry,
            Err(e) => return Ok(Err(e)),
        };
        Ok(self.pending.push(entry).map_err(|e| queue_error(&e)))
    }

    fn length(&mut self) -> wasmtime::Result<u64> {
        self.base.fuel().charge_call(0, 0)?;
        Ok(self.pending.len())
    }

    fn read(&mut self, offset: u64, count: u32) -> wasmtime::Result<Vec<WitPendingDeposit>> {
        let count = count.min(MAX_READ);
        let costs = *self.base.fuel().costs();
        let work = costs.registry_lookup.saturating_mul(u64::from(count));
        let bytes = usize::try_from(count)
            .unwrap_or(usize::MAX)
            .saturating_mul(crate::state::pending::PENDING_DEPOSIT_BYTES);
        self.base.fuel().charge_call(bytes, work)?;
        let window = self
            .pending
            .read(offset, usize::try_from(count).unwrap_or(usize::MAX));
        Ok(window.iter().map(to_wit).collect())
    }

    fn drop_front(&mut self, count: u64) -> wasmtime::Result<Result<(), QueueError>> {
        let cost = self.base.fuel().costs().registry_write;
        self.base.fuel().charge_call(0, cost)?;
        Ok(self.pending.drop_front(count).map_err(|e| queue_error(&e)))
    }

    fn balance_to_consume(&mut self) -> wasmtime::Result<u64> {
        self.base.fuel().charge_call(0, 0)?;
        Ok(self.pending.balance_to_consume())
    }

    fn set_balance_to_consume(&mut self, gwei: u64) -> wasmtime::Result<()> {
        let cost = self.base.fuel().costs().registry_write;
        self.base.fuel().charge_call(0, cost)?;
        self.pending.set_balance_to_consume(gwei);
        Ok(())
    }
}

impl crypto::Host for DepositsCtx {
    fn bls_verify(
        &mut self,
        pubkey: Vec<u8>,
        message: Vec<u8>,
        signature: Vec<u8>,
    ) -> wasmtime::Result<bool> {
        <Self as super::crypto::Host>::bls_verify(self, pubkey, message, signature)
    }

    fn bls_verify_batch(&mut self, sets: Vec<types::SignatureSet>) -> wasmtime::Result<bool> {
        let sets = sets
            .into_iter()
            .map(|s| super::SignatureSet {
                pubkey: s.pubkey,
                message: s.message,
                signature: s.signature,
            })
            .collect();
        <Self as super::crypto::Host>::bls_verify_batch(self, sets)
    }
}

impl types::Host for DepositsCtx {}
impl bindings::modnode::types::types::Host for DepositsCtx {}

/// The block context in `@3.0.0`'s types.
pub fn block_context(ctx: &super::BlockContext) -> BlockContextV3 {
    BlockContextV3 {
        height: ctx.height,
        slot: ctx.slot,
        genesis_fork_version: ctx.genesis_fork_version.clone(),
        eth1_data: types::Eth1Data {
            deposit_root: ctx.eth1_data.deposit_root.clone(),
            deposit_count: ctx.eth1_data.deposit_count,
            block_hash: ctx.eth1_data.block_hash.clone(),
        },
        eth1_deposit_index: ctx.eth1_deposit_index,
    }
}

/// A deposit in `@3.0.0`'s types.
pub fn deposit(d: &super::Deposit) -> DepositV3 {
    DepositV3 {
        pubkey: d.pubkey.clone(),
        withdrawal_credentials: d.withdrawal_credentials.clone(),
        amount: d.amount,
        signature: d.signature.clone(),
        proof: d.proof.clone(),
    }
}

/// What a successful `@3.0.0` call produced: its result and the changes to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V3Output<T> {
    /// The module's answer.
    pub result: T,
    /// The registry changes to apply.
    pub delta: RegistryDelta,
    /// The queue changes to apply.
    pub pending: PendingDelta,
    /// Fuel the call used, host calls included.
    pub fuel_used: u64,
    /// The part of `fuel_used` charged for host calls (BLS verifications, registry and queue
    /// access); `fuel_used - host_fuel` is the module's own computation.
    pub host_fuel: u64,
}

/// A `@3.0.0` call's answer: the module's rejection inside, call failures outside.
pub type V3Result<T> = Result<Result<V3Output<T>, ProcessErrorV3>, CallError>;

/// A `@3.0.0` call's answer in the chain's types.
pub type V3Applied<T> = Result<Result<V3Output<T>, DepositRejection>, CallError>;

impl<T> V3Output<T> {
    /// The same output with the module's answer converted.
    fn convert<U: From<T>>(self) -> V3Output<U> {
        V3Output {
            result: U::from(self.result),
            delta: self.delta,
            pending: self.pending,
            fuel_used: self.fuel_used,
            host_fuel: self.host_fuel,
        }
    }
}

/// A `@3.0.0` answer in the chain's types.
fn applied<T, U: From<T>>(result: V3Result<T>) -> V3Applied<U> {
    Ok(result?
        .map(V3Output::convert)
        .map_err(DepositRejection::from))
}

impl Module<Deposits> {
    fn not_v3(&self, what: &str) -> CallError {
        HostFailure::new(
            &self.meta().name(),
            HostFailureKind::Runtime,
            format!(
                "{what} is a modnode:deposits@3.0.0 call; this module implements @{}",
                self.contract()
            ),
        )
        .into()
    }

    /// [`Module::process_v3`] in the chain's types: queues the block's deposits over
    /// `registry` and `pending`.
    pub fn queue_deposits(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        ctx: &DepositContext,
        deposits: &[ProvenDeposit],
    ) -> V3Applied<QueuedDeposits> {
        let wit: Vec<super::Deposit> = deposits.iter().map(super::convert::deposit).collect();
        let ctx = super::convert::block_context(ctx);
        applied(self.process_v3(registry, pending, &ctx, &wit))
    }

    /// [`Module::process_epoch`] in the chain's types: the epoch transition over `registry`
    /// and `pending`.
    pub fn apply_epoch(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        ctx: &ChainContext,
    ) -> V3Applied<EpochDeposits> {
        let ctx = super::convert::epoch_context(ctx);
        applied(self.process_epoch(registry, pending, ctx))
    }

    /// Queues a block's deposits (`process` of `@3.0.0`) over `registry` and `pending`.
    pub fn process_v3(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        ctx: &super::BlockContext,
        deposits: &[super::Deposit],
    ) -> V3Result<Queued> {
        let deposits_len = deposits.len();
        let count = u64::try_from(deposits_len).unwrap_or(u64::MAX);
        let ctx = block_context(ctx);
        let deposits: Vec<DepositV3> = deposits.iter().map(deposit).collect();
        let out = self.call_v3(registry, pending, count, move |instance, store| {
            instance
                .modnode_deposits_processor()
                .call_process(store, &ctx, &deposits)
        })?;
        // The chain checks that exactly the block's deposits were queued (the queue delta);
        // the count reported cannot exceed them.
        if let Ok(done) = &out {
            crate::runtime::bounds::Output {
                module: &self.meta().name(),
                kind: Kind::Deposits,
            }
            .list_at_most(
                "process().queued",
                usize::try_from(done.result.queued).unwrap_or(usize::MAX),
                deposits_len,
            )?;
        }
        Ok(out)
    }

    /// `process_pending_deposits` (`process-epoch` of `@3.0.0`) over `registry` and `pending`.
    pub fn process_epoch(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        ctx: EpochContext,
    ) -> V3Result<EpochProcessed> {
        let out = self.call_v3(
            registry,
            pending,
            u64::from(deposits_common::electra::MAX_PENDING_DEPOSITS_PER_EPOCH),
            move |instance, store| {
                instance
                    .modnode_deposits_processor()
                    .call_process_epoch(store, &ctx)
            },
        )?;
        if let Ok(done) = &out {
            crate::runtime::bounds::Output {
                module: &self.meta().name(),
                kind: Kind::Deposits,
            }
            .list_at_most(
                "process-epoch().outcomes",
                done.result.outcomes.len(),
                usize::try_from(deposits_common::electra::MAX_PENDING_DEPOSITS_PER_EPOCH)
                    .unwrap_or(usize::MAX),
            )?;
        }
        Ok(out)
    }

    fn call_v3<T: Send + 'static>(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        items: u64,
        call: impl FnOnce(
            &bindings::Deposits,
            &mut wasmtime::Store<DepositsCtx>,
        ) -> wasmtime::Result<Result<T, ProcessErrorV3>>
        + Send
        + 'static,
    ) -> V3Result<T> {
        let name = self.meta().name();
        let Some(fuel) = self.budget_for(items) else {
            return Err(HostFailure::new(
                &name,
                HostFailureKind::Runtime,
                format!("the fuel budget for {items} deposits does not fit a u64"),
            )
            .into());
        };
        if self.contract().major != 3 {
            return Err(self.not_v3("this call"));
        }
        let outcome = self.call_with_fuel(
            fuel,
            move |base| Ok(super::data(registry, pending, base)),
            move |instance, store| match instance {
                super::DepositsInstance::V3(instance) => call(instance, store),
                super::DepositsInstance::V2(_) => Err(wasmtime::Error::msg(
                    "a modnode:deposits@2.0.0 instance for a @3.0.0 call",
                )),
            },
        );
        let fuel_used = outcome.fuel_used;
        let result = outcome.result?;
        let Some(mut data) = outcome.data else {
            return Err(HostFailure::new(
                &self.meta().name(),
                HostFailureKind::Runtime,
                "the call's store data is missing",
            )
            .into());
        };
        let host_fuel = data.base.fuel().charged();
        Ok(result.map(|result| V3Output {
            result,
            delta: data.overlay.into_delta(),
            pending: data.pending.into_delta(),
            fuel_used,
            host_fuel,
        }))
    }
}
