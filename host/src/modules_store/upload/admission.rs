//! What may refuse a module depends on who asks: the operator's upload meets every check, a
//! module the chain scheduled only those that answer the same on every node.

use super::UploadError;
use crate::runtime::Kind;

/// Who asks for a module to be admitted, which decides what may refuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The operator's own upload (`POST /modules`): every check refuses.
    Operator,
    /// A module the chain scheduled, for `kind` (`None`: any consensus kind): only checks that
    /// give the same answer on every node refuse; local limits warn (see the module docs).
    Scheduled {
        /// The kind the chain scheduled the module as, when known.
        kind: Option<Kind>,
    },
}

/// A local limit `refusal` (size, code size, compiled size, warm-up): refuses an operator's
/// upload, only warns for a module the chain scheduled.
pub(crate) fn local_limit(
    admission: Admission,
    name: &str,
    refusal: UploadError,
) -> Result<(), UploadError> {
    match admission {
        Admission::Operator => Err(refusal),
        Admission::Scheduled { .. } => {
            tracing::warn!(
                module = %name,
                reason = refusal.code(),
                error = %refusal,
                "a module the chain scheduled is over a local upload limit; admitted anyway \
                 (the chain's schedule decides, local limits only warn)"
            );
            Ok(())
        }
    }
}
