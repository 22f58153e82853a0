//! The deposit source of an authority: the deposit contract (the built-in dev contract by
//! default, any Ethereum execution client by configuration), followed over the Ethereum
//! JSON-RPC subset, into a deposit cache that proves deposits for the block producer.
//!
//! - [`tree`]: the deposit contract's incremental Merkle tree, byte-compatible with Ethereum.
//! - [`cache`]: every followed deposit with proofs against any past root.
//! - `cached_log` (with the `test-utils` feature): a deposit log over the cache for long
//!   generated runs (pruning tests and benchmarks).
//! - [`abi`]: the `DepositEvent` log encoding.
//! - [`dev_contract`]: the built-in dev deposit contract, persisted in sled.
//! - [`rpc`], [`server`]: the JSON-RPC subset, and its HTTP endpoint.
//! - [`deposit_json`]: the JSON form of a deposit, which `modnode_submitDeposit` takes and
//!   `modnode deposit submit` sends.
//! - [`client`]: a small JSON-RPC client.
//! - [`follower`]: the sans-IO follower and its polling driver.
//! - [`log`]: what the follower read, persisted so a restart resumes where it stopped.
//!
//! [`DepositSource`] is what the node shares between the follower and the producer: it proves
//! deposits through the chain's [`DepositProofs`] trait and picks the producer's eth1 vote
//! ([`DepositSource::choose_vote`]).
//!
//! It votes and proves only from data it can stand behind: a log restored from disk waits until
//! the follower has confirmed its followed block is still the source's
//! ([`DepositSource::confirm`]); a followed block the source reorganised halts it for good
//! ([`DepositSource::halt`]: deposits it followed may be gone); and before any vote or proof its
//! tree over the chain's agreed deposit count must give the chain's agreed root
//! ([`DepositSource::check_agreed`]), so it never builds on deposits the chain did not apply.

pub mod abi;
pub mod cache;
#[cfg(any(test, feature = "test-utils"))]
pub mod cached_log;
pub mod client;
pub mod deposit_json;
pub mod dev_contract;
pub mod follower;
pub mod log;
pub mod rpc;
pub mod server;
pub mod tree;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use self::cache::{CacheError, DepositCache};
use self::dev_contract::Eth1Block;
use self::follower::Followed;
use crate::chain::eth1::{DepositProofs, DepositProofsError, Eth1Data, ProvenDeposit};

/// The producer's vote: the deposit root and count at the followed block, and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eth1Vote {
    /// `root_at(deposit_count)`.
    pub deposit_root: [u8; 32],
    /// Deposits in the log up to the followed block.
    pub deposit_count: u64,
    /// The followed block's hash.
    pub block_hash: [u8; 32],
}

/// Whether the source may vote and prove from what it followed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Standing {
    /// Not yet checked against the source in this run (a log restored from disk).
    #[default]
    Unconfirmed,
    /// The followed block is the source's.
    Confirmed,
    /// A followed block was reorganised: why, and what to do.
    Halted(String),
}

#[derive(Debug, Default)]
struct SourceState {
    cache: DepositCache,
    followed: Option<(Eth1Block, u64)>,
    standing: Standing,
    /// The last problem logged by [`DepositSource::choose_vote`], so it is logged once.
    reported: Option<String>,
}

impl SourceState {
    /// Whether the followed data may be used: confirmed, or nothing followed yet.
    fn usable(&self) -> Result<(), SourceError> {
        match (&self.standing, self.followed) {
            (Standing::Halted(reason), _) => Err(SourceError::Halted(reason.clone())),
            (Standing::Unconfirmed, Some((block, _))) => Err(SourceError::Unconfirmed {
                block: block.number,
            }),
            _ => Ok(()),
        }
    }

    /// [`DepositSource::check_agreed`] under the lock.
    fn check_agreed(&self, agreed: &Eth1Data) -> Result<(), SourceError> {
        self.usable()?;
        let ours = self.cache.root_at(agreed.deposit_count)?;
        if ours != agreed.deposit_root {
            return Err(SourceError::Inconsistent {
                count: agreed.deposit_count,
                ours: hex::encode(ours),
                agreed: hex::encode(agreed.deposit_root),
                block: hex::encode(agreed.block_hash),
            });
        }
        Ok(())
    }
}

/// The followed deposit log, shared by the follower (writes) and the producer (reads).
#[derive(Debug, Default)]
pub struct DepositSource {
    state: Mutex<SourceState>,
    counters: Arc<FollowerCounters>,
}

/// The deposit source's faults the follower met, for `/metrics` (the node's
/// [`Metrics`](crate::node::Metrics) holds the same counters).
#[derive(Debug, Default)]
pub struct FollowerCounters {
    /// Polls at which the source's head was lower than at the poll before.
    pub head_went_back: AtomicU64,
    /// Answers refused as larger than what was asked for can need.
    pub answers_too_large: AtomicU64,
    /// When the source last answered the follower (ms since the Unix epoch; 0: not in this
    /// run), for `/readyz`.
    pub last_answer_unix_ms: AtomicU64,
    /// Why the follower's latest attempt failed; cleared when the source answers again.
    pub last_failure: Mutex<Option<String>>,
}

impl FollowerCounters {
    /// The source answered at `now_ms`.
    pub fn answered(&self, now_ms: u64) {
        self.last_answer_unix_ms
            .store(now_ms, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut last) = self.last_failure.lock() {
            *last = None;
        }
    }

    /// The follower's attempt failed for `why`.
    pub fn failed(&self, why: String) {
        if let Ok(mut last) = self.last_failure.lock() {
            *last = Some(why);
        }
    }

    /// When the source last answered (0: never in this run) and the failure since, if any.
    pub fn reachability(&self) -> (u64, Option<String>) {
        let at = self
            .last_answer_unix_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        let why = self.last_failure.lock().ok().and_then(|l| l.clone());
        (at, why)
    }
}

/// Why the source cannot prove what the producer asks for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The cache cannot answer (usually: the follower is behind the agreed count; transient).
    #[error("deposit cache: {0}")]
    Cache(#[from] CacheError),
    /// The source's lock was poisoned by a panic (ours).
    #[error("the deposit source's lock is poisoned")]
    Poisoned,
    /// The log restored from disk is not yet confirmed against the source (transient: the
    /// follower confirms it on its first poll that reaches the source).
    #[error(
        "the deposit log restored from disk (followed up to block {block}) is not yet confirmed \
         against the deposit source; the follower confirms it once the source answers"
    )]
    Unconfirmed {
        /// The followed block.
        block: u64,
    },
    /// The source reorganised a followed block: nothing it followed is used any more (the
    /// reason says what to do).
    #[error("the deposit source is halted: {0}")]
    Halted(String),
    /// The followed log disagrees with the deposits the chain agreed (and applied): the source
    /// follows another contract or chain, or the contract lost deposits the chain applied.
    #[error(
        "the followed deposit contract disagrees with the chain: its root over the first {count} \
         deposits is {ours}, the chain agreed {agreed} (at source block {block}). This node \
         votes only the chain's agreed eth1 data and proves no deposit from it. Check that the \
         eth1 endpoint, chain id and deposit contract are the chain's; if they are, the \
         contract no longer has deposits the chain applied (a reorg deeper than the follow \
         distance): no local action fixes that, the authorities must agree on a recovery"
    )]
    Inconsistent {
        /// The agreed deposit count.
        count: u64,
        /// Our root at that count (hex).
        ours: String,
        /// The agreed root (hex).
        agreed: String,
        /// The agreed source block hash (hex).
        block: String,
    },
}

impl SourceError {
    /// Whether the source is expected to recover without an operator (it catches up, or the
    /// follower confirms the restored log).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unconfirmed { .. } | Self::Cache(CacheError::UnknownCount { .. })
        )
    }
}

impl DepositSource {
    /// An empty source.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty source counting the follower's faults in `counters`.
    pub fn with_counters(counters: Arc<FollowerCounters>) -> Self {
        Self {
            counters,
            ..Self::default()
        }
    }

    /// The follower's fault counters.
    pub fn counters(&self) -> &FollowerCounters {
        &self.counters
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, SourceState>, SourceError> {
        self.state.lock().map_err(|_| SourceError::Poisoned)
    }

    /// The follower checked that the followed block is still the source's: the followed data
    /// may be voted and proven from (unless the source is halted, which stays).
    pub fn confirm(&self) {
        if let Ok(mut state) = self.state()
            && state.standing == Standing::Unconfirmed
        {
            state.standing = Standing::Confirmed;
        }
    }

    /// Whether the followed data was confirmed against the source in this run.
    pub fn is_confirmed(&self) -> bool {
        self.state()
            .is_ok_and(|s| s.standing == Standing::Confirmed)
    }

    /// The follower found a followed block reorganised: from now on the source votes only the
    /// chain's agreed data and proves nothing, for `reason` (which says what to do). It stays
    /// halted until the node restarts.
    pub fn halt(&self, reason: String) {
        if let Ok(mut state) = self.state()
            && !matches!(state.standing, Standing::Halted(_))
        {
            state.standing = Standing::Halted(reason);
        }
    }

    /// Why the source is halted, if it is.
    pub fn halted(&self) -> Option<String> {
        match self.state().ok()?.standing.clone() {
            Standing::Halted(reason) => Some(reason),
            _ => None,
        }
    }

    /// Whether the source may vote and prove against the chain's `agreed` eth1 data: it is not
    /// halted, its restored log is confirmed, it knows `agreed.deposit_count` deposits, and its
    /// tree over them has `agreed.deposit_root` — the deposits the chain applied are the ones
    /// it followed.
    pub fn check_agreed(&self, agreed: &Eth1Data) -> Result<(), SourceError> {
        self.state()?.check_agreed(agreed)
    }

    /// Appends what the follower read. The follower checked the indices are contiguous; a
    /// `Followed` that does not start at the cache's length is refused (and logged).
    pub fn append(&self, followed: Followed) {
        let Ok(mut state) = self.state() else {
            tracing::error!("deposit source lock poisoned; follower update dropped");
            return;
        };
        if followed.first_index != state.cache.len() {
            tracing::error!(
                first = followed.first_index,
                cached = state.cache.len(),
                "follower update does not continue the deposit cache; dropped"
            );
            return;
        }
        for deposit in followed.deposits {
            if let Err(e) = state.cache.push(deposit) {
                tracing::error!(error = %e, "deposit cache refused a followed deposit");
                return;
            }
        }
        state.followed = Some((followed.block, followed.deposit_count));
    }

    /// The block followed up to and the deposit count at its end, once one is followed.
    pub fn followed(&self) -> Option<(Eth1Block, u64)> {
        self.state().ok().and_then(|s| s.followed)
    }

    /// Deposits known.
    pub fn len(&self) -> u64 {
        self.state().map(|s| s.cache.len()).unwrap_or(0)
    }

    /// Whether no deposit is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vote for the last followed block, once one is followed (and usable).
    pub fn eth1_vote(&self) -> Result<Option<Eth1Vote>, SourceError> {
        let state = self.state()?;
        state.usable()?;
        let Some((block, count)) = state.followed else {
            return Ok(None);
        };
        Ok(Some(Eth1Vote {
            deposit_root: state.cache.root_at(count)?,
            deposit_count: count,
            block_hash: block.hash,
        }))
    }
}

impl DepositSource {
    /// The vote for a block at this point (phase0 `get_eth1_vote` in spirit): among this
    /// period's `votes`, the most common one this source can confirm — its count known, its root
    /// our root at that count, above the agreed count — so authorities converge on one vote;
    /// otherwise our own latest followed vote; otherwise the agreed `eth1_data` (a node whose
    /// follower is behind never votes the count backwards). Votes at the agreed count are not
    /// joined: they would keep the period's votes where they are while the contract moves on.
    /// Block hashes of others' votes are not checked against the source: the root and count are
    /// what proofs rest on.
    ///
    /// Only the agreed data is voted while [`check_agreed`](Self::check_agreed) fails: a halted
    /// or unconfirmed source, or one whose tree disagrees with the deposits the chain agreed,
    /// never votes a root of its own (the disagreement is logged, once).
    pub fn choose_vote(&self, agreed: Eth1Data, votes: &[Eth1Data]) -> Eth1Data {
        let Ok(mut state) = self.state() else {
            return agreed;
        };
        match state.check_agreed(&agreed) {
            Ok(()) => state.reported = None,
            Err(e) => {
                let text = e.to_string();
                if !e.is_transient() && state.reported.as_ref() != Some(&text) {
                    tracing::error!(error = %text, "the deposit source votes the agreed eth1 data");
                    state.reported = Some(text);
                }
                return agreed;
            }
        }
        let confirmed = |vote: &Eth1Data| {
            vote.deposit_count > agreed.deposit_count
                && state
                    .cache
                    .root_at(vote.deposit_count)
                    .is_ok_and(|root| root == vote.deposit_root)
        };
        let mut best: Option<(usize, Eth1Data)> = None;
        for vote in votes.iter().filter(|v| confirmed(v)) {
            let support = votes.iter().filter(|v| *v == vote).count();
            if best.is_none_or(|(s, _)| support > s) {
                best = Some((support, *vote));
            }
        }
        if let Some((_, vote)) = best {
            return vote;
        }
        match state.followed {
            Some((block, count)) if count >= agreed.deposit_count => {
                match state.cache.root_at(count) {
                    Ok(deposit_root) => Eth1Data {
                        deposit_root,
                        deposit_count: count,
                        block_hash: block.hash,
                    },
                    Err(_) => agreed,
                }
            }
            _ => agreed,
        }
    }
}

impl DepositProofs for DepositSource {
    fn check_root(&self, eth1_data: &Eth1Data) -> Result<(), DepositProofsError> {
        match self.check_agreed(eth1_data) {
            Ok(()) => Ok(()),
            Err(SourceError::Cache(CacheError::UnknownCount { count, known })) => {
                Err(DepositProofsError::Behind {
                    known,
                    deposit_count: count,
                })
            }
            Err(e @ SourceError::Inconsistent { .. }) => Err(DepositProofsError::RootMismatch {
                deposit_count: eth1_data.deposit_count,
                reason: e.to_string(),
            }),
            Err(e) => Err(DepositProofsError::Unavailable(e.to_string())),
        }
    }

    fn proven_deposits(
        &self,
        from: u64,
        count: u64,
        deposit_count: u64,
    ) -> Result<Vec<ProvenDeposit>, DepositProofsError> {
        let state = self
            .state()
            .map_err(|e| DepositProofsError::Unavailable(e.to_string()))?;
        state
            .usable()
            .map_err(|e| DepositProofsError::Unavailable(e.to_string()))?;
        state.cache.proven_range(from, count, deposit_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::block::DepositData;
    use crate::chain::eth1::empty_deposit_root;

    fn deposit(i: u8) -> DepositData {
        DepositData {
            pubkey: [i; 48],
            withdrawal_credentials: [2; 32],
            amount: 32_000_000_000,
            signature: [3; 96],
        }
    }

    fn block(number: u64) -> Eth1Block {
        Eth1Block {
            number,
            hash: [number as u8; 32],
            parent_hash: [0; 32],
            timestamp: number,
        }
    }

    /// A source that followed `n` deposits up to block `n`.
    fn source(n: u8) -> DepositSource {
        let source = DepositSource::new();
        source.append(Followed {
            deposits: (0..n).map(deposit).collect(),
            first_index: 0,
            block: block(u64::from(n)),
            deposit_count: u64::from(n),
        });
        source.confirm();
        source
    }

    #[test]
    fn proven_deposits_verify_against_past_roots_with_the_chains_check() {
        let source = source(7);
        let agreed_at_5 = source.state().unwrap().cache.root_at(5).unwrap();
        let proven = source.proven_deposits(2, 3, 5).unwrap();
        assert_eq!(proven.len(), 3);
        for (offset, p) in proven.iter().enumerate() {
            let index = 2 + offset as u64;
            assert_eq!(p.data, deposit(index as u8));
            assert!(p.verify(index, &agreed_at_5), "deposit {index}");
            assert!(!p.verify(index, &source.state().unwrap().cache.root()));
        }
        assert_eq!(
            source.proven_deposits(0, 1, 8),
            Err(DepositProofsError::Behind {
                known: 7,
                deposit_count: 8
            })
        );
        assert!(matches!(
            source.proven_deposits(4, 2, 5),
            Err(DepositProofsError::OutOfRange { .. })
        ));
        assert_eq!(
            DepositSource::new()
                .state()
                .unwrap()
                .cache
                .root_at(0)
                .unwrap(),
            empty_deposit_root()
        );
    }

    #[test]
    fn the_vote_joins_a_confirmed_vote_and_never_goes_backwards() {
        let source = source(6);
        let root = |n| source.state().unwrap().cache.root_at(n).unwrap();
        let agreed = Eth1Data {
            deposit_root: root(2),
            deposit_count: 2,
            block_hash: [2; 32],
        };
        // No votes yet: our own latest.
        let own = source.choose_vote(agreed, &[]);
        assert_eq!(
            own,
            Eth1Data {
                deposit_root: root(6),
                deposit_count: 6,
                block_hash: block(6).hash
            }
        );
        // Another authority's vote we can confirm is joined, the most supported first.
        let theirs = Eth1Data {
            deposit_root: root(4),
            deposit_count: 4,
            block_hash: [4; 32],
        };
        let other = Eth1Data {
            deposit_root: root(5),
            deposit_count: 5,
            block_hash: [5; 32],
        };
        assert_eq!(source.choose_vote(agreed, &[other, theirs, theirs]), theirs);
        // Unconfirmable votes (wrong root, unknown count) are not joined.
        let wrong = Eth1Data {
            deposit_root: [9; 32],
            ..theirs
        };
        let ahead = Eth1Data {
            deposit_root: [9; 32],
            deposit_count: 9,
            block_hash: [9; 32],
        };
        assert_eq!(source.choose_vote(agreed, &[wrong, ahead, ahead]), own);
        // Votes for what is already agreed are not joined: the vote moves on with the source.
        assert_eq!(
            source.choose_vote(agreed, &[agreed, agreed, theirs]),
            theirs
        );
        assert_eq!(source.choose_vote(agreed, &[agreed, agreed]), own);
        // A source behind the agreed count repeats the agreed data.
        let far = Eth1Data {
            deposit_root: [7; 32],
            deposit_count: 10,
            block_hash: [7; 32],
        };
        assert_eq!(source.choose_vote(far, &[theirs]), far);
    }

    /// The producer asks the source to confirm the root before it asks for proofs against it:
    /// a vote for another log's root (here: the same count, other deposits) is refused by
    /// name. (Before: proofs against the source's own tree came back and the block failed its
    /// proof check with no word of why.)
    #[test]
    fn the_producer_gets_a_named_root_mismatch_before_proofs() {
        use std::sync::Arc;

        use crate::chain::genesis::Genesis;
        use crate::chain::native_deposits::Verification;
        use crate::chain::{BuildError, Chain, DepositEngine, workload};
        use crate::store::MemoryStore;

        let genesis = Genesis::generated("test", 8, 7);
        let fork = genesis.genesis_fork_version;
        let chain = Chain::open(
            Arc::new(MemoryStore::new()),
            genesis,
            DepositEngine::Native(Verification::OneByOne),
        )
        .unwrap();
        let ours: Vec<_> = (0..2)
            .map(|i| workload::new_validator(10 + i, 32_000_000_000, fork))
            .collect();
        let source = DepositSource::new();
        source.append(Followed {
            deposits: ours.clone(),
            first_index: 0,
            block: block(2),
            deposit_count: 2,
        });
        source.confirm();
        let mut other = DepositCache::new();
        for i in 0..2 {
            other
                .push(workload::new_validator(20 + i, 32_000_000_000, fork))
                .unwrap();
        }
        let foreign = Eth1Data {
            deposit_root: other.root(),
            deposit_count: 2,
            block_hash: [2; 32],
        };
        match chain.build_block_from(1, 0, foreign, &source) {
            Err(BuildError::Source(DepositProofsError::RootMismatch {
                deposit_count: 2,
                reason,
            })) => assert!(reason.contains("disagrees with the chain"), "{reason}"),
            other => panic!("expected a root mismatch, got {other:?}"),
        }
        let own = source.choose_vote(chain.eth1_data(), &[]);
        assert_eq!(own.deposit_count, 2);
        let block = chain.build_block_from(1, 0, own, &source).unwrap();
        let carried: Vec<_> = block.body.deposits.iter().map(|d| d.data).collect();
        assert_eq!(carried, ours);
    }
}
