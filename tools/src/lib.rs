//! Shared rendering of the embtier command-line tools.

pub mod plot;
