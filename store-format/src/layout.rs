//! Row layouts: element types, initialisers, optimizer codes, and where a
//! row sits in its block group (FORMAT.md, "Row layout").

use crate::*;

/// Element type of the weights of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElemType {
    /// IEEE 754 binary32.
    F32 = 0,
    /// IEEE 754 binary16.
    F16 = 1,
    /// bfloat16.
    Bf16 = 2,
    /// int8 with a per-row f32 scale and bias.
    Int8 = 3,
}

impl ElemType {
    /// Bytes of the weights of a row of `dim` elements, including per-row
    /// quantisation parameters.
    pub fn weight_bytes(self, dim: u32) -> u64 {
        let d = dim as u64;
        match self {
            ElemType::F32 => 4 * d,
            ElemType::F16 | ElemType::Bf16 => 2 * d,
            ElemType::Int8 => d + 8,
        }
    }
}

impl TryFrom<u8> for ElemType {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        Ok(match v {
            0 => ElemType::F32,
            1 => ElemType::F16,
            2 => ElemType::Bf16,
            3 => ElemType::Int8,
            other => return Err(other),
        })
    }
}

/// How a row that was never written is initialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InitKind {
    /// All zeros.
    Zeros = 0,
    /// Uniform in `[-scale, scale)`, a function of (seed, row, element).
    Uniform = 1,
}

impl TryFrom<u8> for InitKind {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        Ok(match v {
            0 => InitKind::Zeros,
            1 => InitKind::Uniform,
            other => return Err(other),
        })
    }
}

/// How a table's row ids map to places in its block groups (catalog entry
/// byte 79). The engine asks only [`RowLayout::locate`] and
/// [`RowLayout::rows_of`] where a row is, so a new map (a co-access-aware
/// one, a hot region) is a variant here and its arms in those two methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
#[non_exhaustive]
pub enum RowMap {
    /// Row `r` is slot `r % rows_per_group` of group `r / rows_per_group`.
    #[default]
    Dense = 0,
}

impl TryFrom<u8> for RowMap {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        Ok(match v {
            0 => RowMap::Dense,
            other => return Err(other),
        })
    }
}

/// Where one row is: its block group, and the byte offset of its bytes in
/// the group's concatenated payload. Ordered by group, then offset: the
/// order in which a write-back visits rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowPlace {
    /// The block group.
    pub group: u64,
    /// Byte offset in the group's payload.
    pub offset: usize,
}

/// Where rows sit in the data file: rows are packed into *groups*; a group is
/// either several rows in one block, or one row spread over several blocks.
/// Which row is where is the [`RowMap`]'s; only [`RowLayout::locate`] and
/// [`RowLayout::rows_of`] answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLayout {
    /// Bytes per row.
    pub row_bytes: u32,
    /// Rows per group (1 when a row needs more than one block).
    pub rows_per_group: u32,
    /// Blocks per group (1 when rows fit in one block).
    pub blocks_per_group: u32,
    /// Which row is in which slot of which group.
    pub map: RowMap,
}

impl RowLayout {
    /// The layout for rows of `row_bytes` bytes (`row_bytes > 0`).
    pub fn for_row_bytes(row_bytes: u32) -> RowLayout {
        let rb = row_bytes.max(1) as usize;
        if rb <= BLOCK_PAYLOAD {
            RowLayout {
                row_bytes,
                rows_per_group: (BLOCK_PAYLOAD / rb) as u32,
                blocks_per_group: 1,
                map: RowMap::Dense,
            }
        } else {
            RowLayout {
                row_bytes,
                rows_per_group: 1,
                blocks_per_group: rb.div_ceil(BLOCK_PAYLOAD) as u32,
                map: RowMap::Dense,
            }
        }
    }

    /// Where `row` is: its group and its offset in the group's payload.
    #[inline]
    pub fn locate(&self, row: u64) -> RowPlace {
        match self.map {
            RowMap::Dense => {
                let rpg = self.rows_per_group.max(1) as u64;
                RowPlace {
                    group: row / rpg,
                    offset: (row % rpg) as usize * self.row_bytes as usize,
                }
            }
        }
    }

    /// The rows of `group` in a table of `table_rows` rows, in slot order.
    pub fn rows_of(&self, group: u64, table_rows: u64) -> std::ops::Range<u64> {
        match self.map {
            RowMap::Dense => {
                let rpg = self.rows_per_group.max(1) as u64;
                let first = group.saturating_mul(rpg).min(table_rows);
                first..first.saturating_add(rpg).min(table_rows)
            }
        }
    }

    /// Rows in `group` of a table of `table_rows` rows.
    pub fn rows_in_group(&self, group: u64, table_rows: u64) -> usize {
        let r = self.rows_of(group, table_rows);
        (r.end - r.start) as usize
    }

    /// Groups of a table of `table_rows` rows.
    pub fn groups_for(&self, table_rows: u64) -> u64 {
        table_rows.div_ceil(self.rows_per_group.max(1) as u64)
    }

    /// Payload bytes of one group's row slots (`rows_per_group` rows).
    pub fn slot_bytes(&self) -> usize {
        self.rows_per_group as usize * self.row_bytes as usize
    }

    /// Data blocks needed for `rows` rows (saturating at `u64::MAX`).
    pub fn blocks_for(&self, rows: u64) -> u64 {
        self.checked_blocks_for(rows).unwrap_or(u64::MAX)
    }

    /// Data blocks needed for `rows` rows, or `None` past `u64::MAX`.
    pub fn checked_blocks_for(&self, rows: u64) -> Option<u64> {
        self.groups_for(rows)
            .checked_mul(self.blocks_per_group as u64)
    }

    /// Bytes of one group's blocks.
    pub fn group_bytes(&self) -> usize {
        self.blocks_per_group as usize * BLOCK_SIZE
    }
}

/// Copy `out.len()` bytes starting at `offset` of a group's concatenated
/// payload out of its raw blocks (`blocks.len()` is a multiple of
/// [`BLOCK_SIZE`]), skipping the trailers.
pub fn read_group_payload(blocks: &[u8], mut offset: usize, out: &mut [u8]) {
    let mut done = 0;
    while done < out.len() {
        let blk = offset / BLOCK_PAYLOAD;
        let within = offset % BLOCK_PAYLOAD;
        let n = (BLOCK_PAYLOAD - within).min(out.len() - done);
        let src = blk * BLOCK_SIZE + within;
        out[done..done + n].copy_from_slice(&blocks[src..src + n]);
        done += n;
        offset += n;
    }
}

/// Write `data` at `offset` of a group's concatenated payload into its raw
/// blocks, skipping the trailers. The inverse of [`read_group_payload`].
pub fn write_group_payload(blocks: &mut [u8], mut offset: usize, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        let blk = offset / BLOCK_PAYLOAD;
        let within = offset % BLOCK_PAYLOAD;
        let n = (BLOCK_PAYLOAD - within).min(data.len() - done);
        let dst = blk * BLOCK_SIZE + within;
        blocks[dst..dst + n].copy_from_slice(&data[done..done + n]);
        done += n;
        offset += n;
    }
}

/// Which fused optimizer a table's rows hold state for. Its state size is
/// a function of `dim`, checked on read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum OptimizerCode {
    /// Not recorded (stores written before the field existed): only
    /// `state_bytes` is known.
    Unrecorded = 0,
    /// SGD: no state.
    Sgd = 1,
    /// Row-wise Adagrad: one f32.
    RowwiseAdagrad = 2,
    /// Adagrad: dim f32.
    Adagrad = 3,
    /// Adam: 2·dim f32 and a u32 step count.
    Adam = 4,
}

impl OptimizerCode {
    /// Bytes of state per row of `dim` elements (`None` when unrecorded).
    pub fn state_bytes(self, dim: u32) -> Option<u64> {
        let d = dim as u64;
        match self {
            OptimizerCode::Unrecorded => None,
            OptimizerCode::Sgd => Some(0),
            OptimizerCode::RowwiseAdagrad => Some(4),
            OptimizerCode::Adagrad => Some(4 * d),
            OptimizerCode::Adam => Some(8 * d + 4),
        }
    }
}

impl TryFrom<u8> for OptimizerCode {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        Ok(match v {
            0 => OptimizerCode::Unrecorded,
            1 => OptimizerCode::Sgd,
            2 => OptimizerCode::RowwiseAdagrad,
            3 => OptimizerCode::Adagrad,
            4 => OptimizerCode::Adam,
            v => return Err(v),
        })
    }
}
