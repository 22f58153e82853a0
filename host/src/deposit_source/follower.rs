//! The deposit follower: reads the deposit contract's log through the JSON-RPC subset, a follow
//! distance behind the source's head, and feeds the [`DepositCache`](super::cache::DepositCache).
//!
//! [`Follower`] is the sans-IO core: given the head block number it says which block range to
//! read next ([`Follower::next_range`]); given that range's logs and blocks it checks them
//! (contract address, event topic, ABI, contiguous indices, no reorg of what it already
//! followed) and returns the deposits appended up to a block ([`Follower::handle_range`]).
//! The page of blocks one `eth_getLogs` asks for adapts: halved down to one block when the
//! provider says the query is too large ([`Follower::shrink_page`]), grown back by a quarter
//! after each range read, never past the configured maximum.
//!
//! [`run`] ([`driver`]) is the thin async driver that polls an endpoint: it first checks the
//! endpoint serves the configured chain and has code at the contract's address, then confirms
//! a followed block restored from the log is still the source's before the source votes from
//! it, and halts the source when a followed block was reorganised.

pub mod driver;

use std::ops::RangeInclusive;
use std::time::Duration;

pub use self::driver::{PollError, StartError, check_endpoint, poll_once, run};
use super::abi::{AbiError, decode_deposit_event, deposit_event_topic};
use super::dev_contract::{Eth1Block, MIN_DEPOSIT_GWEI};
use super::rpc::DEV_CHAIN_ID;
use crate::chain::block::DepositData;

/// What a follower is configured with: where the contract is and how far behind to stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerConfig {
    /// JSON-RPC endpoint (`http://host:port`).
    pub endpoint: String,
    /// The deposit contract's address.
    pub contract: [u8; 20],
    /// The chain id the endpoint must answer to `eth_chainId` (the dev contract's is
    /// [`DEV_CHAIN_ID`]; Ethereum mainnet's is 1).
    pub chain_id: u64,
    /// Blocks to stay behind the source's head (Ethereum mainnet clients use 2048; a dev
    /// source needs little).
    pub follow_distance: u64,
    /// The first block that may hold deposits (the contract's deployment block).
    pub start_block: u64,
    /// Most blocks read per `eth_getLogs` (fewer while the provider refuses ranges this long).
    pub max_blocks_per_query: u64,
    /// Time between polls.
    pub poll_interval: Duration,
}

impl FollowerConfig {
    /// Defaults for following `endpoint` and `contract`: the dev chain id, follow distance 2,
    /// at most 1,000 blocks per query, polls every 500 ms.
    pub fn new(endpoint: String, contract: [u8; 20]) -> Self {
        Self {
            endpoint,
            contract,
            chain_id: DEV_CHAIN_ID,
            follow_distance: 2,
            start_block: 0,
            max_blocks_per_query: 1_000,
            poll_interval: Duration::from_millis(500),
        }
    }
}

/// A log as `eth_getLogs` returns it, fields parsed but not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLog {
    /// Emitting contract.
    pub address: [u8; 20],
    /// Topics.
    pub topics: Vec<[u8; 32]>,
    /// ABI-encoded data.
    pub data: Vec<u8>,
    /// Block number.
    pub block_number: u64,
    /// Block hash.
    pub block_hash: [u8; 32],
    /// Whether the log was removed by a reorg.
    pub removed: bool,
    /// The log's index in its block (`logIndex`; absent from a pending log).
    pub log_index: Option<u64>,
    /// The transaction that emitted it (`transactionHash`; absent from a pending log).
    pub transaction_hash: Option<[u8; 32]>,
}

impl RawLog {
    /// How the log is named in errors: its index in its block and its transaction, when the
    /// source gave them.
    pub fn name(&self) -> String {
        let index = self
            .log_index
            .map_or_else(|| "?".to_string(), |i| i.to_string());
        let tx = self.transaction_hash.map_or_else(
            || "unknown".to_string(),
            |t| format!("0x{}", hex::encode(t)),
        );
        format!("log {index} (transaction {tx})")
    }
}

/// Why the followed log cannot be accepted. Every variant is the source's fault and none is
/// transient: the follower stops advancing and says so until an operator looks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FollowError {
    /// A log's data is not a `DepositEvent`.
    #[error("deposit log in block {block}: {source}")]
    Abi {
        /// The block.
        block: u64,
        /// What is wrong.
        source: AbiError,
    },
    /// A `DepositEvent` of less than 1 ETH: the real contract refuses such a deposit, so the
    /// log is not one it emitted.
    #[error(
        "deposit {log} in block {block}: amount {amount} Gwei is below the deposit contract's \
         minimum of {MIN_DEPOSIT_GWEI} Gwei (1 ETH), which the contract refuses: a malformed log \
         (check the endpoint serves the real deposit contract's log)"
    )]
    LowAmount {
        /// The block.
        block: u64,
        /// The log, named by its index and transaction.
        log: String,
        /// The amount the log gives.
        amount: u64,
    },
    /// A log from another contract or with another topic, or marked removed.
    #[error("log in block {block} is not a DepositEvent of the followed contract: {reason}")]
    Foreign {
        /// The block.
        block: u64,
        /// What is wrong.
        reason: String,
    },
    /// A log outside the asked range, or out of block order.
    #[error("log in block {block} is outside blocks {from}..={to} or out of order")]
    OutOfRange {
        /// The log's block.
        block: u64,
        /// Range start.
        from: u64,
        /// Range end.
        to: u64,
    },
    /// The deposit indices are not contiguous.
    #[error(
        "deposit log gap: expected deposit index {expected}, the source gave index {found} (block {block})"
    )]
    Gap {
        /// The next index expected.
        expected: u64,
        /// The index found.
        found: u64,
        /// Its block.
        block: u64,
    },
    /// A block already followed changed its hash: the source reorganised deeper than the
    /// follow distance.
    #[error(
        "the source reorganised block {number} (followed hash {followed}, now {now}): deeper than the follow distance"
    )]
    Reorg {
        /// The block.
        number: u64,
        /// Hash followed (hex).
        followed: String,
        /// Hash the source gives now (hex).
        now: String,
    },
    /// The source's block does not match the range asked for.
    #[error("asked for block {asked}, the source gave block {got}")]
    WrongBlock {
        /// Asked for.
        asked: u64,
        /// Given.
        got: u64,
    },
}

/// Deposits appended to the log up to a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed {
    /// The new deposits, starting at index `first_index`.
    pub deposits: Vec<DepositData>,
    /// Index of `deposits[0]`.
    pub first_index: u64,
    /// The block followed up to (inclusive).
    pub block: Eth1Block,
    /// Deposits in the log up to and including `block`.
    pub deposit_count: u64,
}

/// The sans-IO follower.
#[derive(Debug, Clone)]
pub struct Follower {
    contract: [u8; 20],
    follow_distance: u64,
    max_blocks: u64,
    /// Blocks asked per `eth_getLogs` now: `1..=max_blocks`.
    page: u64,
    next_block: u64,
    next_index: u64,
    last: Option<Eth1Block>,
    /// The source's head at the last poll.
    head: Option<u64>,
}

/// The source's head went back between two polls (a reorganisation to a shorter chain, or an
/// endpoint behind a load balancer whose backends disagree): nothing new is read until it
/// passes what was followed, and the operator is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadWentBack {
    /// The head at the poll before.
    pub previous: u64,
    /// The head now.
    pub now: u64,
}

impl Follower {
    /// A follower at the start of the log.
    pub fn new(config: &FollowerConfig) -> Self {
        Self {
            contract: config.contract,
            follow_distance: config.follow_distance,
            max_blocks: config.max_blocks_per_query.max(1),
            page: config.max_blocks_per_query.max(1),
            next_block: config.start_block,
            next_index: 0,
            last: None,
            head: None,
        }
    }

    /// A follower that already followed up to `block`, where the log held `deposit_count`
    /// deposits (restored from a [`FollowedLog`]): it goes on from the next block, and checks
    /// first that the source still has `block` as it was.
    pub fn resume(config: &FollowerConfig, block: Eth1Block, deposit_count: u64) -> Self {
        Self {
            next_block: block.number.saturating_add(1).max(config.start_block),
            next_index: deposit_count,
            last: Some(block),
            ..Self::new(config)
        }
    }

    /// The last block followed.
    pub fn last(&self) -> Option<Eth1Block> {
        self.last
    }

    /// The next deposit index expected.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// The follow distance.
    pub fn follow_distance(&self) -> u64 {
        self.follow_distance
    }

    /// Blocks asked per `eth_getLogs` now.
    pub fn page(&self) -> u64 {
        self.page
    }

    /// The provider refused a range as too large: halves the page. Returns false when it is
    /// one block already (the refusal is then not about the range's length).
    pub fn shrink_page(&mut self) -> bool {
        if self.page <= 1 {
            return false;
        }
        self.page = self.page.div_ceil(2);
        true
    }

    /// A range was read: the page grows back by a quarter (at least one block), up to the
    /// configured maximum.
    fn grow_page(&mut self) {
        let step = (self.page / 4).max(1);
        self.page = self.page.saturating_add(step).min(self.max_blocks);
    }

    /// Records the source's head at a poll; says when it is lower than at the poll before
    /// (once per change: a head that stays back is not reported again).
    pub fn observe_head(&mut self, head: u64) -> Option<HeadWentBack> {
        let previous = self.head.replace(head)?;
        (head < previous).then_some(HeadWentBack {
            previous,
            now: head,
        })
    }

    /// The blocks to read next when the source's head is `head`, if any.
    pub fn next_range(&self, head: u64) -> Option<RangeInclusive<u64>> {
        let target = head.checked_sub(self.follow_distance)?;
        if target < self.next_block {
            return None;
        }
        let end = self
            .next_block
            .saturating_add(self.page.saturating_sub(1))
            .min(target);
        Some(self.next_block..=end)
    }

    /// Checks the last followed block against the source's block of that number now
    /// (`None`: the source has no such block). `Ok` when nothing was followed yet.
    pub fn check_followed(&self, now: Option<Eth1Block>) -> Result<(), FollowError> {
        let Some(last) = self.last else {
            return Ok(());
        };
        let now = now.ok_or(FollowError::WrongBlock {
            asked: last.number,
            got: u64::MAX,
        })?;
        if now.number != last.number {
            return Err(FollowError::WrongBlock {
                asked: last.number,
                got: now.number,
            });
        }
        if now.hash != last.hash {
            return Err(FollowError::Reorg {
                number: last.number,
                followed: hex::encode(last.hash),
                now: hex::encode(now.hash),
            });
        }
        Ok(())
    }

    /// Checks the logs and the end block of `range` (and, when a block was followed before,
    /// that block as the source gives it now) and advances. Nothing changes on error.
    pub fn handle_range(
        &mut self,
        range: RangeInclusive<u64>,
        logs: &[RawLog],
        end: Eth1Block,
        previous_now: Option<Eth1Block>,
    ) -> Result<Followed, FollowError> {
        let (from, to) = (*range.start(), *range.end());
        if end.number != to {
            return Err(FollowError::WrongBlock {
                asked: to,
                got: end.number,
            });
        }
        self.check_followed(previous_now)?;
        if let Some(last) = self.last
            && to == last.number.saturating_add(1)
            && end.parent_hash != last.hash
        {
            return Err(FollowError::Reorg {
                number: last.number,
                followed: hex::encode(last.hash),
                now: hex::encode(end.parent_hash),
            });
        }
        let topic = deposit_event_topic();
        let mut expected = self.next_index;
        let mut previous_block = from;
        let mut deposits = Vec::with_capacity(logs.len());
        for log in logs {
            let block = log.block_number;
            if block < previous_block || block > to {
                return Err(FollowError::OutOfRange { block, from, to });
            }
            previous_block = block;
            if log.address != self.contract {
                return Err(FollowError::Foreign {
                    block,
                    reason: format!("emitted by 0x{}", hex::encode(log.address)),
                });
            }
            if log.topics.first() != Some(&topic) || log.topics.len() != 1 {
                return Err(FollowError::Foreign {
                    block,
                    reason: "topics are not [DepositEvent]".into(),
                });
            }
            if log.removed {
                return Err(FollowError::Foreign {
                    block,
                    reason: "marked removed".into(),
                });
            }
            if block == to && log.block_hash != end.hash {
                return Err(FollowError::Reorg {
                    number: to,
                    followed: hex::encode(end.hash),
                    now: hex::encode(log.block_hash),
                });
            }
            let (deposit, index) = decode_deposit_event(&log.data)
                .map_err(|source| FollowError::Abi { block, source })?;
            if deposit.amount < MIN_DEPOSIT_GWEI {
                return Err(FollowError::LowAmount {
                    block,
                    log: log.name(),
                    amount: deposit.amount,
                });
            }
            if index != expected {
                return Err(FollowError::Gap {
                    expected,
                    found: index,
                    block,
                });
            }
            expected = expected.checked_add(1).ok_or(FollowError::Gap {
                expected,
                found: index,
                block,
            })?;
            deposits.push(deposit);
        }
        let followed = Followed {
            deposits,
            first_index: self.next_index,
            block: end,
            deposit_count: expected,
        };
        self.next_index = expected;
        self.next_block = to.saturating_add(1);
        self.last = Some(end);
        self.grow_page();
        Ok(followed)
    }
}

#[cfg(test)]
mod tests;
