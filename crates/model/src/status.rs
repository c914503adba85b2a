//! Statuses and types as enums. Each is written as its Nomad string (in JSON and MessagePack alike), and
//! each keeps a value it does not know in `Other` rather than refusing it: a newer client or API user may
//! send a status this build has never heard of, and it must survive a round trip through state, a snapshot
//! and the API unchanged. Validation, not decoding, decides whether an unknown value is an error.

use serde::de::{self, Deserializer, Visitor};
use serde::{Serialize, Serializer};
use std::fmt;

/// Defines a string-valued enum: its variants with their Nomad names, the default, and an `Other` variant
/// holding any other string. It is written and read as that string.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident default $default:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this build does not know, kept as it was written.
            Other(Box<str>),
        }

        impl $name {
            /// Every value this build knows, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The known value `text` names, or `None`.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $( $text => Some($name::$variant), )+
                    _ => None,
                }
            }

            /// `text` as a value, known or not.
            pub fn from_text(text: &str) -> $name {
                $name::parse(text).unwrap_or_else(|| $name::Other(text.into()))
            }

            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $text, )+
                    $name::Other(text) => text,
                }
            }

            /// Whether this build knows the value (it is not `Other`).
            pub fn is_known(&self) -> bool {
                !matches!(self, $name::Other(_))
            }
        }

        impl Default for $name {
            fn default() -> $name {
                $name::$default
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(text: &str) -> Result<$name, Self::Err> {
                Ok($name::from_text(text))
            }
        }

        /// Compares by the written name, as a `String` compares with a `&str`.
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> $name {
                $name::from_text(text)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<$name, D::Error> {
                // Go writes an unset string as "", so "" reads as the default, as a missing field does.
                deserializer.deserialize_str(TextVisitor(stringify!($name))).map(|text| {
                    if text.is_empty() {
                        $name::default()
                    } else {
                        $name::from_text(&text)
                    }
                })
            }
        }
    };
}

/// Reads a string (borrowed, owned or as bytes) for a [`string_enum!`] type.
struct TextVisitor(&'static str);

impl<'de> Visitor<'de> for TextVisitor {
    type Value = std::borrow::Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a string ({})", self.0)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(std::borrow::Cow::Owned(v))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        std::str::from_utf8(v)
            .map(|s| std::borrow::Cow::Owned(s.to_owned()))
            .map_err(|_| E::invalid_value(de::Unexpected::Bytes(v), &self))
    }
}

string_enum! {
    /// What the servers want of an allocation.
    pub enum DesiredStatus default Run {
        Run = "run",
        Stop = "stop",
        Evict = "evict",
    }
}

impl DesiredStatus {
    /// Whether the servers want the allocation gone (`stop` or `evict`).
    pub fn is_terminal(&self) -> bool {
        matches!(self, DesiredStatus::Stop | DesiredStatus::Evict)
    }
}

string_enum! {
    /// What the client reports of an allocation.
    pub enum ClientStatus default Pending {
        Pending = "pending",
        Running = "running",
        Complete = "complete",
        Failed = "failed",
        Lost = "lost",
        /// The client is disconnected; the allocation may still be running.
        Unknown = "unknown",
    }
}

impl ClientStatus {
    /// Whether the client reports the allocation finished (`complete`, `failed` or `lost`).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
        )
    }
}

string_enum! {
    /// A task's state within its allocation.
    pub enum TaskStatus default Pending {
        Pending = "pending",
        Running = "running",
        Dead = "dead",
    }
}

string_enum! {
    /// An evaluation's progress.
    pub enum EvalStatus default Pending {
        Blocked = "blocked",
        Pending = "pending",
        Complete = "complete",
        Failed = "failed",
        Canceled = "canceled",
    }
}

impl EvalStatus {
    /// Whether the evaluation is finished (`complete`, `failed` or `canceled`).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            EvalStatus::Complete | EvalStatus::Failed | EvalStatus::Canceled
        )
    }
}

string_enum! {
    /// A deployment's progress.
    pub enum DeploymentStatus default Running {
        Running = "running",
        Paused = "paused",
        Failed = "failed",
        Successful = "successful",
        Cancelled = "cancelled",
        Pending = "pending",
        /// Waiting on another region (multiregion deployments).
        Blocked = "blocked",
        Unblocking = "unblocking",
        Initializing = "initializing",
    }
}

impl DeploymentStatus {
    /// Whether the deployment may still make progress (running, paused, pending, blocked, unblocking,
    /// initializing); terminal ones are failed, successful and cancelled.
    pub fn is_active(&self) -> bool {
        !matches!(
            self,
            DeploymentStatus::Failed | DeploymentStatus::Successful | DeploymentStatus::Cancelled
        )
    }
}

string_enum! {
    /// A node's status, as its heartbeats (or their absence) make it.
    pub enum NodeStatus default Initializing {
        Initializing = "initializing",
        Ready = "ready",
        Down = "down",
        Disconnected = "disconnected",
    }
}

string_enum! {
    /// Whether the scheduler may place new allocations on a node.
    pub enum SchedulingEligibility default Eligible {
        Eligible = "eligible",
        Ineligible = "ineligible",
    }
}

string_enum! {
    /// A node drain's progress.
    pub enum DrainStatus default Draining {
        Draining = "draining",
        Complete = "complete",
        Canceled = "canceled",
    }
}

string_enum! {
    /// A job's status, derived from its allocations and evaluations.
    pub enum JobStatus default Pending {
        Pending = "pending",
        Running = "running",
        Dead = "dead",
    }
}

string_enum! {
    /// Which scheduler runs a job; `_core` is the servers' own garbage collection.
    pub enum JobType default Service {
        Service = "service",
        Batch = "batch",
        System = "system",
        Sysbatch = "sysbatch",
        Core = "_core",
    }
}

/// Serde helpers for an optional status written as `""` when absent (the form the Raft log has always
/// used for "keep the current one"): `#[serde(with = "model::status::empty_as_none")]`.
pub mod empty_as_none {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => v.serialize(serializer),
            None => serializer.serialize_str(""),
        }
    }

    pub fn deserialize<'de, T, D>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        T: std::str::FromStr<Err = std::convert::Infallible>,
        D: Deserializer<'de>,
    {
        let text = Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Ok(match text.as_deref() {
            None | Some("") => None,
            Some(t) => t.parse().ok(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_round_trip_as_their_nomad_names() {
        for name in ClientStatus::NAMES {
            let status = ClientStatus::from_text(name);
            assert!(status.is_known());
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{name}\"")
            );
            let back: ClientStatus = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(back, status);
        }
        assert_eq!(JobType::parse("_core"), Some(JobType::Core));
        assert_eq!(DeploymentStatus::Cancelled.as_str(), "cancelled");
        assert_eq!(EvalStatus::Canceled.as_str(), "canceled");
    }

    #[test]
    fn an_unknown_value_survives_json_and_messagepack() {
        let status: EvalStatus = serde_json::from_str("\"deferred\"").unwrap();
        assert_eq!(status, EvalStatus::Other("deferred".into()));
        assert!(!status.is_known());
        assert_eq!(serde_json::to_string(&status).unwrap(), "\"deferred\"");
        let packed = rpc::codec::encode(&status).unwrap();
        let back: EvalStatus = rpc::codec::decode(&packed).unwrap();
        assert_eq!(back, status);
    }

    #[test]
    fn a_value_of_the_wrong_type_is_refused_with_the_type_named() {
        let err = serde_json::from_str::<NodeStatus>("7")
            .unwrap_err()
            .to_string();
        assert!(err.contains("NodeStatus"), "{err}");
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Stop {
        #[serde(default, with = "empty_as_none")]
        status: Option<ClientStatus>,
    }

    #[test]
    fn an_optional_status_is_empty_when_absent() {
        let none = Stop { status: None };
        assert_eq!(serde_json::to_string(&none).unwrap(), r#"{"status":""}"#);
        assert_eq!(
            serde_json::from_str::<Stop>(r#"{"status":""}"#).unwrap(),
            none
        );
        assert_eq!(
            serde_json::from_str::<Stop>(r#"{"status":null}"#).unwrap(),
            none
        );
        assert_eq!(serde_json::from_str::<Stop>("{}").unwrap(), none);
        let lost = Stop {
            status: Some(ClientStatus::Lost),
        };
        let packed = rpc::codec::encode(&lost).unwrap();
        assert_eq!(rpc::codec::decode::<Stop>(&packed).unwrap(), lost);
    }

    #[test]
    fn terminal_and_active_sets() {
        assert!(DesiredStatus::Evict.is_terminal());
        assert!(!DesiredStatus::Run.is_terminal());
        assert!(ClientStatus::Lost.is_terminal());
        assert!(!ClientStatus::Unknown.is_terminal());
        assert!(EvalStatus::Canceled.is_terminal());
        assert!(!EvalStatus::Blocked.is_terminal());
        assert!(DeploymentStatus::Paused.is_active());
        assert!(!DeploymentStatus::Successful.is_active());
    }
}
