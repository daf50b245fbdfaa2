//! Shared rendering of the embtier command-line tools.

pub mod cli;
pub mod plot;
