//! The fixed vocabularies an author writes as bare identifiers: effect classes, consent and
//! retry rules, externality, statuses and HTTP methods.

/// A fixed set of snake-case identifiers, such as the effect classes.
pub(crate) trait Keyword: Copy + 'static {
    /// What the keyword is, for messages: "effect class".
    const WHAT: &'static str;
    /// Every name, in the order messages list them.
    const NAMES: &'static [&'static str];
    /// The keyword named `name`.
    fn from_name(name: &str) -> Option<Self>;
    /// The snake-case name the author writes.
    fn name(self) -> &'static str;
    /// The name of the matching variant of the core enum.
    fn variant(self) -> &'static str;
}

macro_rules! keywords {
    ($(#[$doc:meta])* $ty:ident, $what:literal { $($variant:ident = $name:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub(crate) enum $ty {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Keyword for $ty {
            const WHAT: &'static str = $what;
            const NAMES: &'static [&'static str] = &[$($name),*];

            fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some(Self::$variant),)*
                    _ => None,
                }
            }

            fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }

            fn variant(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant),)*
                }
            }
        }
    };
}

keywords! {
    /// `EffectClass`.
    Effect, "effect class" {
        Observe = "observe",
        ReversibleChange = "reversible_change",
        ExternalCommitment = "external_commitment",
        IrreversibleOrBroad = "irreversible_or_broad",
    }
}

keywords! {
    /// `ConsentRule`, weakest first (the derived order is the strength order).
    Consent, "consent rule" {
        None = "none",
        Session = "session",
        PerCall = "per_call",
    }
}

keywords! {
    /// `RetryRule`.
    Retry, "retry rule" {
        Never = "never",
        Safe = "safe",
        IdempotencyKey = "idempotency_key",
    }
}

keywords! {
    /// `Externality`.
    Externality, "externality" {
        Internal = "internal",
        External = "external",
    }
}

keywords! {
    /// `SecretMode`: what happens to a credential-shaped value in an answer.
    Secrets, "secret mode" {
        Mask = "mask",
        Refuse = "refuse",
        Allow = "allow",
    }
}

keywords! {
    /// `InstructionMode`: what happens to instruction-shaped text in an answer.
    Instructions, "instruction mode" {
        Flag = "flag",
        Strip = "strip",
        Refuse = "refuse",
    }
}

keywords! {
    /// `PersonalKind`: a kind of personal data (`#[sensitive(email)]`,
    /// `personal_data = [email]`).
    Personal, "kind of personal data" {
        Email = "email",
        Phone = "phone",
        Card = "card",
        Iban = "iban",
        NationalId = "national_id",
        IpAddress = "ip_address",
        Name = "name",
        Address = "address",
        BirthDate = "birth_date",
    }
}

impl Personal {
    /// Whether the executor can find this kind in free text (mirrors
    /// `PersonalKind::detectable`).
    pub(crate) fn detectable(self) -> bool {
        !matches!(self, Self::Name | Self::Address | Self::BirthDate)
    }

    /// The message for an unknown kind `name`: the kinds expected (only the detectable ones
    /// when `detectable_only`), and the nearest of them to a typo.
    pub(crate) fn unknown(name: &str, detectable_only: bool) -> String {
        let names: Vec<&str> = Self::NAMES
            .iter()
            .copied()
            .filter(|n| !detectable_only || Self::from_name(n).is_some_and(Self::detectable))
            .collect();
        let message = format!(
            "unknown kind of personal data `{name}`; expected {}",
            super::one_of(&names)
        );
        match super::closest(name, names.iter().copied()) {
            Some(close) => format!("{message} (did you mean `{close}`?)"),
            None => message,
        }
    }
}

keywords! {
    /// `Status`.
    Status, "status" {
        Completed = "completed",
        Pending = "pending",
        AlreadyInDesiredState = "already_in_desired_state",
        Rejected = "rejected",
        Unknown = "unknown",
    }
}

keywords! {
    /// `HttpMethod`; written as the key of the path (`post = "/v1/…"`).
    Method, "HTTP method" {
        Get = "get",
        Post = "post",
        Put = "put",
        Patch = "patch",
        Delete = "delete",
    }
}

impl Effect {
    /// The weakest consent rule an author may choose (mirrors `EffectClass::consent_floor`).
    pub(crate) fn consent_floor(self) -> Consent {
        match self {
            Self::Observe | Self::ReversibleChange => Consent::None,
            Self::ExternalCommitment | Self::IrreversibleOrBroad => Consent::PerCall,
        }
    }
}
