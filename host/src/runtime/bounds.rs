//! The checks of [`OutputBounds`]: every list and string a module returns is measured against
//! its kind's bound before the host uses it, and one over it is a
//! [`ModuleFault::OutputOverBound`] naming the output, its length and the bound.
//! Each kind's refusals are counted for `/metrics`
//! (`modnode_module_output_over_bound_<kind>_total`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::OverBound;
use super::kinds::OutputBounds;
use super::{Kind, ModuleFault, ModuleInfo};

static OVER_BOUND_DEPOSITS: AtomicU64 = AtomicU64::new(0);
static OVER_BOUND_CHECKPOINT: AtomicU64 = AtomicU64::new(0);
static OVER_BOUND_GOSSIP_POLICY: AtomicU64 = AtomicU64::new(0);

fn counter(kind: Kind) -> &'static AtomicU64 {
    match kind {
        Kind::Deposits => &OVER_BOUND_DEPOSITS,
        Kind::Checkpoint => &OVER_BOUND_CHECKPOINT,
        Kind::GossipPolicy => &OVER_BOUND_GOSSIP_POLICY,
    }
}

/// Outputs of modules of `kind` refused as over their bound since the process started.
pub fn over_bound(kind: Kind) -> u64 {
    counter(kind).load(Ordering::Relaxed)
}

/// One output's length against its bound.
pub(crate) struct Output<'a> {
    /// The module's name.
    pub module: &'a str,
    /// Its kind.
    pub kind: Kind,
}

impl Output<'_> {
    fn check(
        &self,
        output: impl FnOnce() -> String,
        len: usize,
        bound: usize,
        unit: &'static str,
    ) -> Result<(), ModuleFault> {
        if len <= bound {
            return Ok(());
        }
        counter(self.kind).fetch_add(1, Ordering::Relaxed);
        let to_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        Err(ModuleFault::OutputOverBound(Box::new(OverBound {
            module: self.module.to_string(),
            kind: self.kind,
            output: output(),
            len: to_u64(len),
            bound: to_u64(bound),
            unit,
        })))
    }

    fn bounds(&self) -> &'static OutputBounds {
        self.kind.bounds()
    }

    /// The items of the kind's main list (`what` names it).
    pub fn list(&self, what: &str, len: usize) -> Result<(), ModuleFault> {
        self.check(|| what.to_string(), len, self.bounds().list_items, "items")
    }

    /// The items of the kind's main list, also at most `at_most` (one per input item).
    pub fn list_at_most(&self, what: &str, len: usize, at_most: usize) -> Result<(), ModuleFault> {
        let bound = self.bounds().list_items.min(at_most);
        self.check(|| what.to_string(), len, bound, "items")
    }

    /// The state a stateful contract's module hands back to keep (`what` names the call).
    pub fn state(&self, what: &str, len: usize) -> Result<(), ModuleFault> {
        self.check(|| what.to_string(), len, self.bounds().state_bytes, "bytes")
    }

    /// A byte list (`what` names it).
    pub fn bytes(&self, what: &str, len: usize) -> Result<(), ModuleFault> {
        self.check(|| what.to_string(), len, self.bounds().bytes, "bytes")
    }

    /// An error message (`what` names it).
    pub fn message(&self, what: &str, message: &str) -> Result<(), ModuleFault> {
        let bound = self.bounds().message_bytes;
        self.check(|| what.to_string(), message.len(), bound, "bytes")
    }

    /// Everything `describe()` returned.
    pub fn describe(&self, info: &ModuleInfo) -> Result<(), ModuleFault> {
        let bounds = self.bounds();
        let string = |what: &str, s: &str| {
            let what = || format!("describe().{what}");
            self.check(what, s.len(), bounds.describe_string_bytes, "bytes")
        };
        string("kind", &info.kind)?;
        string("description", &info.description)?;
        self.check(
            || "describe().params".to_string(),
            info.params.len(),
            bounds.describe_params,
            "items",
        )?;
        for (i, (name, value)) in info.params.iter().enumerate() {
            string(&format!("params[{i}] name"), name)?;
            string(&format!("params[{i}] value"), value)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(description: usize, params: usize) -> ModuleInfo {
        ModuleInfo {
            kind: "gossip-policy".into(),
            version: 1,
            description: "d".repeat(description),
            params: (0..params).map(|i| (format!("p{i}"), "v".into())).collect(),
        }
    }

    #[test]
    fn outputs_over_their_kind_bound_are_module_faults_naming_the_bound() {
        let out = Output {
            module: "m",
            kind: Kind::GossipPolicy,
        };
        let bounds = Kind::GossipPolicy.bounds();
        assert!(out.describe(&info(bounds.describe_string_bytes, 3)).is_ok());
        let before = over_bound(Kind::GossipPolicy);
        let err = out
            .describe(&info(bounds.describe_string_bytes + 1, 0))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "module m returned describe().description of 4097 bytes, over the gossip-policy \
             bound of 4096 bytes: the module is at fault; fix it or use another version"
        );
        let err = out
            .describe(&info(1, bounds.describe_params + 1))
            .unwrap_err();
        assert!(
            err.to_string().contains("describe().params of 65 items"),
            "{err}"
        );
        assert!(out.list("plan().targets", bounds.list_items).is_ok());
        let err = out
            .list("plan().targets", bounds.list_items + 1)
            .unwrap_err();
        assert!(
            matches!(&err, ModuleFault::OutputOverBound(o) if o.len == 4097 && o.bound == 4096),
            "{err:?}"
        );
        assert!(over_bound(Kind::GossipPolicy) >= before + 3);
        // A gossip policy returns no messages: any is over the bound.
        assert!(out.message("m", "").is_ok());
        assert!(out.message("m", "x").is_err());
    }
}
