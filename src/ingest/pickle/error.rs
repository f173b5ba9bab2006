//! Why a pickle was refused, and the opcodes that are refused because they would run code.

use std::fmt;

/// An opcode that imports or calls code (or hands the unpickler's caller an object it makes):
/// refused wherever it appears, before anything of it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeOpcode {
    /// `c`: import a module's attribute.
    Global,
    /// `0x93`: the same, from the stack.
    StackGlobal,
    /// `R`: call.
    Reduce,
    /// `b`: `__setstate__`.
    Build,
    /// `i`: import and instantiate.
    Inst,
    /// `o`: instantiate.
    Obj,
    /// `0x81`: `cls.__new__`.
    NewObj,
    /// `0x92`: `cls.__new__` with keywords.
    NewObjEx,
    /// `P`: a persistent id, resolved by the caller's code.
    PersId,
    /// `Q`: the same, from the stack.
    BinPersId,
    /// `0x82`: the extension registry.
    Ext1,
    /// `0x83`.
    Ext2,
    /// `0x84`.
    Ext4,
    /// `0x97`: an out-of-band buffer.
    NextBuffer,
    /// `0x98`.
    ReadonlyBuffer,
}

impl CodeOpcode {
    /// The opcode of `byte`, if it is one of these.
    pub fn of(byte: u8) -> Option<CodeOpcode> {
        Some(match byte {
            b'c' => CodeOpcode::Global,
            0x93 => CodeOpcode::StackGlobal,
            b'R' => CodeOpcode::Reduce,
            b'b' => CodeOpcode::Build,
            b'i' => CodeOpcode::Inst,
            b'o' => CodeOpcode::Obj,
            0x81 => CodeOpcode::NewObj,
            0x92 => CodeOpcode::NewObjEx,
            b'P' => CodeOpcode::PersId,
            b'Q' => CodeOpcode::BinPersId,
            0x82 => CodeOpcode::Ext1,
            0x83 => CodeOpcode::Ext2,
            0x84 => CodeOpcode::Ext4,
            0x97 => CodeOpcode::NextBuffer,
            0x98 => CodeOpcode::ReadonlyBuffer,
            _ => return None,
        })
    }

    /// Its name in Python's `pickletools`.
    pub fn name(self) -> &'static str {
        match self {
            CodeOpcode::Global => "GLOBAL",
            CodeOpcode::StackGlobal => "STACK_GLOBAL",
            CodeOpcode::Reduce => "REDUCE",
            CodeOpcode::Build => "BUILD",
            CodeOpcode::Inst => "INST",
            CodeOpcode::Obj => "OBJ",
            CodeOpcode::NewObj => "NEWOBJ",
            CodeOpcode::NewObjEx => "NEWOBJ_EX",
            CodeOpcode::PersId => "PERSID",
            CodeOpcode::BinPersId => "BINPERSID",
            CodeOpcode::Ext1 => "EXT1",
            CodeOpcode::Ext2 => "EXT2",
            CodeOpcode::Ext4 => "EXT4",
            CodeOpcode::NextBuffer => "NEXT_BUFFER",
            CodeOpcode::ReadonlyBuffer => "READONLY_BUFFER",
        }
    }
}

impl fmt::Display for CodeOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a pickle was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickleError {
    /// An opcode that would import or call code.
    Forbidden {
        /// The opcode, e.g. `GLOBAL`.
        opcode: CodeOpcode,
        /// Byte offset of the opcode.
        offset: usize,
    },
    /// An opcode this reader does not know.
    UnknownOpcode {
        /// The byte.
        byte: u8,
        /// Its offset.
        offset: usize,
    },
    /// The data ended inside an opcode or before STOP.
    Truncated {
        /// Offset where more bytes were needed.
        offset: usize,
    },
    /// Structurally wrong: stack underflow, missing mark, bad memo index, bad text.
    Malformed {
        /// What was wrong.
        what: String,
        /// Offset of the opcode.
        offset: usize,
    },
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickleError::Forbidden { opcode, offset } => write!(
                f,
                "pickle opcode {opcode} at byte {offset} would import or call code; refused (steptrace reads data only)"
            ),
            PickleError::UnknownOpcode { byte, offset } => {
                write!(f, "unknown pickle opcode 0x{byte:02x} at byte {offset}")
            }
            PickleError::Truncated { offset } => write!(f, "pickle ends early at byte {offset}"),
            PickleError::Malformed { what, offset } => {
                write!(f, "malformed pickle at byte {offset}: {what}")
            }
        }
    }
}

impl std::error::Error for PickleError {}
