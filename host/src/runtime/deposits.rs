//! Host side of the `modnode:deposits` world: the registry overlay and BLS verification a
//! deposits module imports, and typed calls into its `processor` export — in the chain's
//! deposit types ([`Module::apply`], [`DepositCall::new`]; `convert` converts them) for the
//! chain, in the WIT types for the runtime's own tests.

use std::sync::OnceLock;

use wasmtime::component::{HasSelf, Linker};

use super::error::{HostFailure, HostFailureKind};
use super::module::{CallBase, Module, StoreData, World, unimplemented_contract};
use super::{CallError, Kind, ModuleInfo, Version};
use crate::deposit::{DepositContext, DepositOutcome, DepositRejection, ProvenDeposit};
use crate::state::{
    OverlayError, PendingOverlay, PendingQueue, RegistryDelta, RegistryOverlay, SharedRegistry,
};

#[cfg(any(test, feature = "test-utils"))]
pub mod bench_support;
pub mod convert;
pub mod migration;
pub mod v3;

mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/deposits"],
        world: "modnode:deposits/deposits",
        additional_derives: [PartialEq, Eq],
        imports: { default: trappable },
    });
}

pub use bindings::modnode::deposits::types::{
    BlockContext, Deposit, Eth1Data as WitEth1Data, Outcome, ProcessError, RegistryError,
    SignatureSet,
};
use bindings::modnode::deposits::{crypto, registry, types};

/// What `registry.index-of` returns for an unknown pubkey (never a valid index).
pub const NOT_FOUND: u32 = u32::MAX;

/// Store data of one deposits call.
pub struct DepositsCtx {
    overlay: RegistryOverlay,
    /// The pending-deposit queue (`@3.0.0`); over an empty queue for `@2.0.0` calls, which
    /// cannot reach it.
    pending: PendingOverlay,
    base: CallBase,
}

impl StoreData for DepositsCtx {
    fn base(&mut self) -> &mut CallBase {
        &mut self.base
    }
}

/// The WIT error for an overlay refusal (every refusal is the module's input's, none traps).
pub fn registry_error(e: &OverlayError) -> RegistryError {
    match e {
        OverlayError::DuplicatePubkey => RegistryError::DuplicatePubkey,
        OverlayError::BadLength(field) => RegistryError::BadLength((*field).to_string()),
        OverlayError::UnknownIndex(i) => RegistryError::UnknownIndex(*i),
        OverlayError::BalanceOverflow(i) => RegistryError::BalanceOverflow(*i),
        OverlayError::RegistryFull => RegistryError::RegistryFull,
    }
}

/// Maps an overlay refusal to the WIT error.
#[allow(
    clippy::unnecessary_wraps,
    reason = "the shape every WIT host function returns"
)]
fn registry_result<T>(r: Result<T, OverlayError>) -> wasmtime::Result<Result<T, RegistryError>> {
    Ok(r.map_err(|e| registry_error(&e)))
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
    ) -> wasmtime::Result<Result<u32, RegistryError>> {
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
    ) -> wasmtime::Result<Result<(), RegistryError>> {
        let cost = self.base.fuel().costs().registry_write;
        self.base.fuel().charge_call(0, cost)?;
        registry_result(self.overlay.increase_balance(index, amount))
    }
}

impl crypto::Host for DepositsCtx {
    fn bls_verify(
        &mut self,
        pubkey: Vec<u8>,
        message: Vec<u8>,
        signature: Vec<u8>,
    ) -> wasmtime::Result<bool> {
        let cost = self.base.fuel().costs().bls_verify;
        let bytes = pubkey
            .len()
            .saturating_add(message.len())
            .saturating_add(signature.len());
        self.base.fuel().charge_call(bytes, cost)?;
        Ok(self.base.sig_cache.verify(&pubkey, &message, &signature))
    }

    fn bls_verify_batch(&mut self, sets: Vec<SignatureSet>) -> wasmtime::Result<bool> {
        let costs = *self.base.fuel().costs();
        let n = u64::try_from(sets.len()).unwrap_or(u64::MAX);
        let cost = costs
            .bls_verify_batch_per_set
            .checked_mul(n)
            .and_then(|c| c.checked_add(costs.bls_verify_batch_base))
            .unwrap_or(u64::MAX);
        let bytes = sets.iter().fold(0usize, |acc, s| {
            acc.saturating_add(s.pubkey.len())
                .saturating_add(s.message.len())
                .saturating_add(s.signature.len())
        });
        self.base.fuel().charge_call(bytes, cost)?;
        let sets: Vec<crate::crypto::SignatureSet<'_>> = sets
            .iter()
            .map(|s| crate::crypto::SignatureSet {
                pubkey: &s.pubkey,
                message: &s.message,
                signature: &s.signature,
            })
            .collect();
        Ok(self.base.sig_cache.verify_batch(&sets))
    }
}

impl types::Host for DepositsCtx {}
impl bindings::modnode::types::types::Host for DepositsCtx {}

/// The `modnode:deposits` world.
pub struct Deposits;

/// A loaded deposits module.
pub type DepositsModule = Module<Deposits>;

/// The typed pre-instance of a module's optional migration export.
type MigrationPre = migration::bindings::MigratingPre<DepositsCtx>;

/// A linked deposits module, with the bindings of its contract and of its migration, if it
/// exports one.
#[derive(Clone)]
pub enum DepositsPre {
    /// `@2.0.0`: deposits applied in the block.
    V2(bindings::DepositsPre<DepositsCtx>, Option<MigrationPre>),
    /// `@3.0.0`: deposits queued, applied per epoch (Electra).
    V3(v3::bindings::DepositsPre<DepositsCtx>, Option<MigrationPre>),
}

impl DepositsPre {
    /// The module's migration, if it exports one.
    fn migration(&self) -> Option<&MigrationPre> {
        match self {
            Self::V2(_, m) | Self::V3(_, m) => m.as_ref(),
        }
    }
}

/// An instantiated deposits module, with the bindings of its contract.
pub enum DepositsInstance {
    /// `@2.0.0`.
    V2(bindings::Deposits),
    /// `@3.0.0`.
    V3(v3::bindings::Deposits),
}

impl World for Deposits {
    const KIND: Kind = Kind::Deposits;
    type Data = DepositsCtx;
    type Pre = DepositsPre;
    type Instance = DepositsInstance;

    /// `@2.0.0` and `@3.0.0`, each with its own bindings.
    fn linker(
        engine: &wasmtime::Engine,
        contract: Version,
    ) -> wasmtime::Result<Linker<DepositsCtx>> {
        let mut linker = Linker::new(engine);
        match contract.major {
            2 => {
                bindings::Deposits::add_to_linker::<_, HasSelf<DepositsCtx>>(&mut linker, |ctx| {
                    ctx
                })?;
                // A @2.0.0 module's down-migration imports the @3.0.0 registry, queue and
                // crypto (`wit/deposits-3`, world `migrating`); modules without one import
                // none of them.
                migration::bindings::Migrating::add_to_linker::<_, HasSelf<DepositsCtx>>(
                    &mut linker,
                    |ctx| ctx,
                )?
            }
            3 => v3::bindings::Deposits::add_to_linker::<_, HasSelf<DepositsCtx>>(
                &mut linker,
                |ctx| ctx,
            )?,
            _ => return Err(unimplemented_contract(Self::KIND, contract)),
        }
        Ok(linker)
    }

    fn pre(
        pre: wasmtime::component::InstancePre<DepositsCtx>,
        contract: Version,
    ) -> wasmtime::Result<Self::Pre> {
        let migration = migration::pre(&pre)?;
        match contract.major {
            2 => Ok(DepositsPre::V2(bindings::DepositsPre::new(pre)?, migration)),
            3 => Ok(DepositsPre::V3(
                v3::bindings::DepositsPre::new(pre)?,
                migration,
            )),
            _ => Err(unimplemented_contract(Self::KIND, contract)),
        }
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut wasmtime::Store<DepositsCtx>,
    ) -> wasmtime::Result<Self::Instance> {
        Ok(match pre {
            DepositsPre::V2(pre, _) => DepositsInstance::V2(pre.instantiate(store)?),
            DepositsPre::V3(pre, _) => DepositsInstance::V3(pre.instantiate(store)?),
        })
    }

    fn idle_data(base: CallBase) -> Result<DepositsCtx, HostFailure> {
        let registry: SharedRegistry = std::sync::Arc::new(crate::state::Registry::new());
        Ok(data(registry, PendingQueue::new(), base))
    }

    fn describe(
        instance: &Self::Instance,
        store: &mut wasmtime::Store<DepositsCtx>,
    ) -> wasmtime::Result<ModuleInfo> {
        let info = match instance {
            DepositsInstance::V2(i) => i.modnode_deposits_processor().call_describe(store)?,
            DepositsInstance::V3(i) => {
                let info = i.modnode_deposits_processor().call_describe(store)?;
                return Ok(ModuleInfo {
                    kind: info.kind,
                    version: info.version,
                    description: info.description,
                    params: info.params,
                });
            }
        };
        Ok(ModuleInfo {
            kind: info.kind,
            version: info.version,
            description: info.description,
            params: info.params,
        })
    }

    /// A block's worth of the deposit shapes every chain sees: a new validator with a valid
    /// signature, a top-up of it, and a new pubkey whose signature does not verify.
    fn dry_run(module: &DepositsModule) -> Result<u64, CallError> {
        let (ctx, deposits) = warmup_block().clone();
        let registry: SharedRegistry = std::sync::Arc::new(crate::state::Registry::new());
        if module.contract().major == 3 {
            // The block queues the three deposits; the epoch applies them.
            let queued =
                match module.process_v3(registry.clone(), PendingQueue::new(), &ctx, &deposits)? {
                    Ok(out) => out,
                    Err(_) => return Ok(0),
                };
            let mut pending = PendingQueue::new();
            if pending.apply(&queued.pending).is_err() {
                return Ok(queued.fuel_used);
            }
            let epoch = v3::EpochContext {
                height: ctx.height,
                finality_depth: 0,
                genesis_fork_version: ctx.genesis_fork_version.clone(),
            };
            let applied = module.process_epoch(registry, pending, epoch)?;
            return Ok(queued
                .fuel_used
                .saturating_add(applied.map_or(0, |out| out.fuel_used)));
        }
        let out = module.process(registry, ctx, deposits)?;
        Ok(match out {
            Ok(out) => out.fuel_used,
            // A rejection is a valid answer for a dry run; the module ran.
            Err(_) => 0,
        })
    }
}

/// The built-in warm-up block, built once: see [`build_warmup_block`].
fn warmup_block() -> &'static (BlockContext, Vec<Deposit>) {
    static BLOCK: OnceLock<(BlockContext, Vec<Deposit>)> = OnceLock::new();
    BLOCK.get_or_init(build_warmup_block)
}

/// A block at height 1, slot 1, fork version 0 of three deposits: a new validator with a valid
/// signature, a top-up of it (carrying the same signature, which a top-up does not need), and
/// a new pubkey with that signature, which does not verify. Proven against the deposit
/// contract's tree holding exactly these three, as every block's deposits are. Built here from
/// the deposit contract's own hashing (`deposits_common`), so the engine needs nothing of the
/// chain to warm a module.
fn build_warmup_block() -> (BlockContext, Vec<Deposit>) {
    use deposits_common::{ssz, tree};
    use sha2::{Digest as _, Sha256};

    let fork = [0u8; 4];
    let withdrawal_credentials = [1u8; 32];
    let amount = 32_000_000_000;
    let key = crate::crypto::Keypair::from_seed([0x5a; 32]);
    let other = crate::crypto::Keypair::from_seed([0xa5; 32]);
    let message = ssz::deposit_message_root(&key.pubkey, &withdrawal_credentials, amount);
    let signature = key.sign(&ssz::signing_root(&message, &ssz::deposit_domain(fork)));
    // (pubkey, amount) of each deposit; all three carry `signature`.
    let shapes = [
        (key.pubkey, amount),
        (key.pubkey, 1_000_000_000),
        (other.pubkey, amount),
    ];
    let mut log = tree::reference::NaiveDepositTree::new();
    for (pubkey, amount) in &shapes {
        log.push(tree::deposit_data_root(
            pubkey,
            &withdrawal_credentials,
            *amount,
            &signature,
        ));
    }
    let count = log.len();
    let deposit_root = log.root();
    let block_hash: [u8; 32] = Sha256::digest(deposit_root).into();
    let ctx = BlockContext {
        height: 1,
        slot: 1,
        genesis_fork_version: fork.to_vec(),
        eth1_data: WitEth1Data {
            deposit_root: deposit_root.to_vec(),
            deposit_count: count,
            block_hash: block_hash.to_vec(),
        },
        eth1_deposit_index: 0,
    };
    // The tree holds exactly these three deposits, so proving them cannot fail; an empty
    // warm-up block would still run the module.
    let proofs = log.proofs(0, count, count).unwrap_or_default();
    let deposits = shapes
        .iter()
        .zip(proofs)
        .map(|((pubkey, amount), proof)| Deposit {
            pubkey: pubkey.to_vec(),
            withdrawal_credentials: withdrawal_credentials.to_vec(),
            amount: *amount,
            signature: signature.to_vec(),
            proof: proof.concat(),
        })
        .collect();
    (ctx, deposits)
}

fn data(registry: SharedRegistry, pending: PendingQueue, base: CallBase) -> DepositsCtx {
    DepositsCtx {
        overlay: RegistryOverlay::new(registry),
        pending: PendingOverlay::new(pending),
        base,
    }
}

/// One real deposits call the chain made: a canonical block's deposits, its context and the
/// registry before it (a copy-on-write snapshot). Kept for the warm-up of new deposits modules.
#[derive(Clone)]
pub struct DepositCall {
    /// The registry the block ran on.
    pub registry: SharedRegistry,
    /// The block's context.
    pub ctx: BlockContext,
    /// Its deposits.
    pub deposits: Vec<Deposit>,
}

impl DepositCall {
    /// The deposits call of a block (its context and deposits) on `registry`.
    pub fn new(registry: SharedRegistry, ctx: &DepositContext, deposits: &[ProvenDeposit]) -> Self {
        Self {
            registry,
            ctx: convert::block_context(ctx),
            deposits: deposits.iter().map(convert::deposit).collect(),
        }
    }
}

impl std::fmt::Debug for DepositCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} deposits of the block at height {} (slot {}, eth1 deposit index {})",
            self.deposits.len(),
            self.ctx.height,
            self.ctx.slot,
            self.ctx.eth1_deposit_index
        )
    }
}

/// What a successful deposits call produced: its outcomes in the WIT types ([`Module::process`])
/// or the chain's ([`Module::apply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositsOutput<O = Outcome> {
    /// One outcome per deposit, in order.
    pub outcomes: Vec<O>,
    /// The registry changes to apply.
    pub delta: RegistryDelta,
    /// The `eth1_deposit_index` after the block, as the module reports it.
    pub eth1_deposit_index: u64,
    /// Fuel the call used: wasm operators and host calls together (what the budget bounds).
    pub fuel_used: u64,
    /// The part of `fuel_used` charged for host calls (BLS verifications, registry access);
    /// `fuel_used - host_fuel` is the module's own computation.
    pub host_fuel: u64,
}

impl Module<Deposits> {
    /// [`Module::process`] in the chain's types: the block's deposits over `registry`.
    /// `Ok(Err(_))`: the module rejected the block.
    pub fn apply(
        &self,
        registry: SharedRegistry,
        ctx: &DepositContext,
        deposits: &[ProvenDeposit],
    ) -> Result<Result<DepositsOutput<DepositOutcome>, DepositRejection>, CallError> {
        let wit = deposits.iter().map(convert::deposit).collect();
        Ok(self
            .process(registry, convert::block_context(ctx), wit)?
            .map(|out| DepositsOutput {
                outcomes: out.outcomes.into_iter().map(DepositOutcome::from).collect(),
                delta: out.delta,
                eth1_deposit_index: out.eth1_deposit_index,
                fuel_used: out.fuel_used,
                host_fuel: out.host_fuel,
            })
            .map_err(DepositRejection::from))
    }

    /// Applies a block's deposits over `registry`. `Ok(Err(_))` means the module rejected the
    /// block (it is invalid); `Err(_)` means the module or the host failed (see [`CallError`]).
    /// Either way nothing was written: the caller applies [`DepositsOutput::delta`] only on
    /// `Ok(Ok(_))`.
    pub fn process(
        &self,
        registry: SharedRegistry,
        ctx: BlockContext,
        deposits: Vec<Deposit>,
    ) -> Result<Result<DepositsOutput, ProcessError>, CallError> {
        let name = self.meta().name();
        if self.contract().major != 2 {
            return Err(HostFailure::new(
                &name,
                HostFailureKind::Runtime,
                format!(
                    "`process` is a modnode:deposits@2.0.0 call; this module implements @{} \
                     (use `process_v3` / `process_epoch`)",
                    self.contract()
                ),
            )
            .into());
        }
        // The budget grows with the block (see `EngineProfile::deposits_budget_per_deposit`):
        // deterministic, since every node runs the same deposits.
        let count = u64::try_from(deposits.len()).unwrap_or(u64::MAX);
        let Some(fuel) = self.budget_for(count) else {
            return Err(HostFailure::new(
                &name,
                HostFailureKind::Runtime,
                format!("the fuel budget for {count} deposits does not fit a u64"),
            )
            .into());
        };
        let outcome = self.call_with_fuel(
            fuel,
            move |base| Ok(data(registry, PendingQueue::new(), base)),
            move |instance, store| match instance {
                DepositsInstance::V2(instance) => instance
                    .modnode_deposits_processor()
                    .call_process(&mut *store, &ctx, &deposits),
                // A height scheduled on a @3.0.0 module runs `process_v3` (the queue is
                // state the caller provides); reaching here is the host's bug.
                DepositsInstance::V3(_) => Err(wasmtime::Error::msg(
                    "a modnode:deposits@3.0.0 module called through the @2.0.0 `process`",
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
        let name = self.meta().name();
        let output = super::bounds::Output {
            module: &name,
            kind: Kind::Deposits,
        };
        match &result {
            Ok(processed) => output.list_at_most(
                "process().outcomes",
                processed.outcomes.len(),
                usize::try_from(count).unwrap_or(usize::MAX),
            )?,
            Err(
                ProcessError::Malformed(message)
                | ProcessError::BadContext(message)
                | ProcessError::Registry(RegistryError::BadLength(message)),
            ) => output.message("process() error", message)?,
            Err(_) => {}
        }
        Ok(result.map(|processed| DepositsOutput {
            outcomes: processed.outcomes,
            delta: data.overlay.into_delta(),
            eth1_deposit_index: processed.eth1_deposit_index,
            fuel_used,
            host_fuel,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The warm-up block as it was built through the chain's workload log and conversions.
    fn through_the_chain() -> (BlockContext, Vec<Deposit>) {
        use crate::chain::block::DepositData;
        use crate::chain::eth1::DepositProofs as _;
        let fork = [0u8; 4];
        let key = crate::crypto::Keypair::from_seed([0x5a; 32]);
        let mut new = DepositData {
            pubkey: key.pubkey,
            withdrawal_credentials: [1; 32],
            amount: 32_000_000_000,
            signature: [0; 96],
        };
        new.signature = key.sign(&new.signing_root(fork));
        let top_up = DepositData {
            amount: 1_000_000_000,
            ..new
        };
        let other = crate::crypto::Keypair::from_seed([0xa5; 32]);
        let bad = DepositData {
            pubkey: other.pubkey,
            ..new
        };
        let mut log = crate::chain::workload::DevDepositLog::new();
        for d in [new, top_up, bad] {
            log.push(d);
        }
        let eth1 = log.eth1_data();
        let proven = log
            .proven_deposits(0, eth1.deposit_count, eth1.deposit_count)
            .unwrap();
        let ctx = DepositContext {
            height: 1,
            slot: 1,
            genesis_fork_version: fork,
            eth1_data: eth1,
            eth1_deposit_index: 0,
        };
        let call = DepositCall::new(
            std::sync::Arc::new(crate::state::Registry::new()),
            &ctx,
            &proven,
        );
        (call.ctx, call.deposits)
    }

    #[test]
    fn the_warm_up_block_is_the_one_the_chain_builds_from_the_same_deposits() {
        let (ctx, deposits) = build_warmup_block();
        assert_eq!(deposits.len(), 3);
        assert!(deposits.iter().all(|d| d.proof.len() == 33 * 32));
        assert_eq!((ctx, deposits), through_the_chain());
    }
}
