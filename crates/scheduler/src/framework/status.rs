//! A plugin's answer (upstream's `framework.Status`): a code, the reasons
//! and the plugin that gave them. A cycle asks for one per node and
//! filter, so the common answers cost no allocation: success carries no
//! reason, and a rejection usually carries one fixed text (upstream's
//! `ErrReason…` constants), kept inline as a `&'static str`.

use std::borrow::Cow;

/// What a plugin's answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Success,
    /// Something went wrong: the attempt fails and the pod is retried.
    Error,
    /// The pod does not fit, but preemption might make it.
    Unschedulable,
    /// The pod does not fit and preemption cannot help.
    UnschedulableAndUnresolvable,
    /// The plugin has nothing to do for this pod (its later extension
    /// points are skipped).
    Skip,
}

/// A reason: a fixed text or one composed for this answer.
pub type Reason = Cow<'static, str>;

/// The reasons of an answer, in order; the first is kept inline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reasons {
    first: Option<Reason>,
    rest: Vec<Reason>,
}

impl Reasons {
    pub const fn new() -> Self {
        Reasons {
            first: None,
            rest: Vec::new(),
        }
    }

    pub fn one(reason: impl Into<Reason>) -> Self {
        Reasons {
            first: Some(reason.into()),
            rest: Vec::new(),
        }
    }

    pub fn push(&mut self, reason: impl Into<Reason>) {
        match self.first {
            None => self.first = Some(reason.into()),
            Some(_) => self.rest.push(reason.into()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub fn len(&self) -> usize {
        self.first.iter().count() + self.rest.len()
    }

    pub fn iter(&self) -> Iter<'_> {
        self.first.iter().chain(&self.rest).map(|r| r.as_ref())
    }
}

impl<R: Into<Reason>> FromIterator<R> for Reasons {
    fn from_iter<I: IntoIterator<Item = R>>(iter: I) -> Self {
        let mut reasons = Reasons::new();
        reasons.extend(iter);
        reasons
    }
}

impl<R: Into<Reason>> Extend<R> for Reasons {
    fn extend<I: IntoIterator<Item = R>>(&mut self, iter: I) {
        for reason in iter {
            self.push(reason);
        }
    }
}

impl IntoIterator for Reasons {
    type Item = Reason;
    type IntoIter = std::iter::Chain<std::option::IntoIter<Reason>, std::vec::IntoIter<Reason>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<'a> IntoIterator for &'a Reasons {
    type Item = &'a str;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<S: AsRef<str>, const N: usize> PartialEq<[S; N]> for Reasons {
    fn eq(&self, other: &[S; N]) -> bool {
        self.len() == N && self.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

/// The reasons, borrowed, in order.
pub type Iter<'a> = std::iter::Map<
    std::iter::Chain<std::option::Iter<'a, Reason>, std::slice::Iter<'a, Reason>>,
    fn(&'a Reason) -> &'a str,
>;

/// A plugin's answer: a code and the reasons, named by the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Reasons,
    pub plugin: &'static str,
}

impl Status {
    pub const fn success() -> Self {
        Status {
            code: Code::Success,
            reasons: Reasons::new(),
            plugin: "",
        }
    }

    pub fn new(code: Code, reason: impl Into<Reason>) -> Self {
        Status {
            code,
            reasons: Reasons::one(reason),
            plugin: "",
        }
    }

    pub fn unschedulable(reason: impl Into<Reason>) -> Self {
        Status::new(Code::Unschedulable, reason)
    }

    pub fn unresolvable(reason: impl Into<Reason>) -> Self {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }

    pub fn error(reason: impl Into<Reason>) -> Self {
        Status::new(Code::Error, reason)
    }

    pub const fn skip() -> Self {
        Status {
            code: Code::Skip,
            reasons: Reasons::new(),
            plugin: "",
        }
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    pub fn is_rejection(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// The same, attributed to `plugin`.
    pub fn by(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }

    /// The reasons joined, as upstream's `Status.Message`.
    pub fn message(&self) -> String {
        self.reasons.iter().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_keep_their_order_and_join_as_upstreams_message() {
        let mut status = Status::unschedulable("Too many pods");
        status.reasons.push(format!("Insufficient {}", "cpu"));
        status.reasons.extend(["Insufficient memory"]);
        assert_eq!(
            status.reasons,
            ["Too many pods", "Insufficient cpu", "Insufficient memory"]
        );
        assert_eq!(
            status.message(),
            "Too many pods, Insufficient cpu, Insufficient memory"
        );
        assert!(Status::success().reasons.is_empty());
        assert_eq!(Status::success().message(), "");
    }
}
