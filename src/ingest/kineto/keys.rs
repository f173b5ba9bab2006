//! Kineto's event and `args` member names, spelled once. The fast reader (`fast.rs`) and the
//! serde path (`raw.rs`) both turn a key into a field through these tables, so the two readers
//! cannot drift apart on which key fills which field (the keys were spelled in three
//! places).

/// A table of member names: each variant with its spelling and any older spellings of it.
/// `parse` compiles to one `match` on the text, which is what the readers ran before the
/// table existed (a linear search over the spellings was measurably slower per `args` key).
macro_rules! key_table {
    ($(#[$doc:meta])* $name:ident {
        $($(#[$vdoc:meta])* $variant:ident => $text:literal $(| $alias:literal)*,)+
    }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every spelling a reader accepts, with the field it names.
            #[cfg(test)]
            pub(crate) const SPELLINGS: &'static [(&'static str, Self)] =
                &[$(($text, Self::$variant), $(($alias, Self::$variant),)*)+];

            /// The member's name as current Kineto writes it.
            pub(crate) const fn text(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }

        }

        impl KeyTable for $name {
            #[inline]
            fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text $(| $alias)* => Some(Self::$variant),)+
                    _ => None,
                }
            }

            fn text(self) -> &'static str {
                $name::text(self)
            }

            #[inline]
            fn bit(self) -> u32 {
                1 << self as u32
            }
        }
    };
}

/// What both readers need of a key table.
pub(crate) trait KeyTable: Copy + Sized + 'static {
    /// The field `text` names, or `None` for a member steptrace does not read.
    fn parse(text: &str) -> Option<Self>;
    fn text(self) -> &'static str;
    /// One bit per field, for the readers' check that no field comes twice (serde's derive
    /// refused a repeated field, aliases included; both readers still do).
    fn bit(self) -> u32;
}

key_table! {
    /// The members of one `traceEvents` element that steptrace reads.
    EventKey {
        Ph => "ph",
        Cat => "cat",
        Name => "name",
        Pid => "pid",
        Tid => "tid",
        Ts => "ts",
        Dur => "dur",
        Id => "id",
        Args => "args",
    }
}

key_table! {
    /// The members of an event's `args` that steptrace reads.
    ArgKey {
        /// PyTorch 1.x wrote `external id`.
        ExtId => "External id" | "external id",
        RfId => "Record function id",
        Seq => "Sequence number",
        FwdTid => "Fwd thread id",
        Correlation => "correlation",
        Addr => "Addr",
        /// An allocator event's signed size.
        SignedBytes => "Bytes",
        TotalAllocated => "Total Allocated",
        TotalReserved => "Total Reserved",
        DeviceType => "Device Type",
        DeviceId => "Device Id",
        Device => "device",
        Stream => "stream",
        /// A memcpy's or memset's size.
        Bytes => "bytes",
        /// PyTorch 1.x wrote `Input dims`.
        InputDims => "Input Dims" | "Input dims",
        InputType => "Input type",
        ConcreteInputs => "Concrete Inputs",
        Name => "name",
        /// A collective's metadata, on NCCL kernels and `record_param_comms`.
        Collective => "Collective name",
        PgName => "Process Group Name",
        InNelems => "In msg nelems",
        OutNelems => "Out msg nelems",
        Dtype => "dtype",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<K: KeyTable + PartialEq + std::fmt::Debug>(spellings: &[(&str, K)]) {
        let mut bits = 0u32;
        for &(text, key) in spellings {
            assert_eq!(K::parse(text), Some(key), "{text}");
            assert_eq!(K::parse(key.text()), Some(key));
            assert!(key.bit().is_power_of_two());
            bits |= key.bit();
        }
        // Distinct bits: as many as there are distinct fields.
        let mut fields: Vec<&str> = spellings.iter().map(|(_, k)| k.text()).collect();
        fields.dedup();
        assert_eq!(bits.count_ones() as usize, fields.len());
        assert_eq!(K::parse("Ev Idx"), None);
    }

    #[test]
    fn every_spelling_names_its_field_and_fields_have_distinct_bits() {
        round_trip(EventKey::SPELLINGS);
        round_trip(ArgKey::SPELLINGS);
        assert_eq!(ArgKey::parse("external id"), Some(ArgKey::ExtId));
        assert_eq!(ArgKey::parse("Input dims"), Some(ArgKey::InputDims));
    }
}
