//! The table catalog after the superblocks (FORMAT.md, "Catalog").

use crate::*;

/// Catalog entry field offsets, relative to the entry (see FORMAT.md, "Catalog").
pub mod te {
    /// `[u8; 64]` table name, UTF-8, zero padded.
    pub const NAME: usize = 0;
    /// `u64` number of rows.
    pub const ROWS: usize = 64;
    /// `u32` elements per row.
    pub const DIM: usize = 72;
    /// `u8` element type ([`super::ElemType`]).
    pub const ELEM: usize = 76;
    /// `u8` initialiser kind ([`super::InitKind`]).
    pub const INIT: usize = 77;
    /// `u8` optimizer kind ([`super::OptimizerCode`]); 0 when not recorded.
    pub const OPTIMIZER: usize = 78;
    /// `u8` row map ([`super::RowMap`]): how row ids map to places in the
    /// table's block groups; 0 (dense) is the only one this build writes.
    pub const ROW_MAP: usize = 79;
    /// `u32` bytes of optimizer state stored after the weights of each row.
    pub const STATE_BYTES: usize = 80;
    /// `f32` initialiser scale `s` of uniform(-s, s).
    pub const INIT_SCALE: usize = 84;
    /// `u64` initialiser seed.
    pub const SEED: usize = 88;
    /// `u64` first data block of the table.
    pub const BASE_BLOCK: usize = 96;
    /// `u64` number of data blocks of the table.
    pub const BLOCK_COUNT: usize = 104;
    /// `u32` bytes per row (weights + state, rounded up to 4).
    pub const ROW_BYTES: usize = 112;
    /// `u32` rows per block group.
    pub const ROWS_PER_GROUP: usize = 116;
    /// `u32` blocks per block group.
    pub const BLOCKS_PER_GROUP: usize = 120;
    /// `u32` reserved, zero.
    pub const RESERVED2: usize = 124;
    /// Size of one entry.
    pub const SIZE: usize = 128;
}

/// Longest table name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// Largest `dim` a catalog entry may have (2^20 elements).
pub const MAX_DIM: u32 = 1 << 20;

/// One table of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct TableEntry {
    /// Table name (1..=64 bytes of UTF-8, no NUL).
    pub name: String,
    /// Number of rows; ids are `0..rows`.
    pub rows: u64,
    /// Elements per row.
    pub dim: u32,
    /// Element type of the weights.
    pub elem: ElemType,
    /// Initialiser of never-written rows.
    pub init: InitKind,
    /// Scale of the uniform initialiser.
    pub init_scale: f32,
    /// Seed of the initialiser.
    pub seed: u64,
    /// Optimizer state bytes stored after the weights.
    pub state_bytes: u32,
    /// The optimizer whose state the rows hold.
    pub optimizer: OptimizerCode,
    /// First data block.
    pub base_block: u64,
    /// Data blocks of the table.
    pub block_count: u64,
    /// Placement of rows in blocks.
    pub layout: RowLayout,
}

impl TableEntry {
    /// The first data block of group `group` (its blocks follow it).
    #[inline]
    pub fn first_block_of(&self, group: u64) -> u64 {
        self.base_block + group * self.layout.blocks_per_group as u64
    }

    /// Row bytes for a table shape: weights + state, rounded up to 4.
    pub fn row_bytes_for(elem: ElemType, dim: u32, state_bytes: u32) -> u64 {
        (elem.weight_bytes(dim) + state_bytes as u64).next_multiple_of(4)
    }

    fn encode_into(&self, b: &mut [u8]) {
        let name = self.name.as_bytes();
        b[te::NAME..te::NAME + name.len()].copy_from_slice(name);
        put_u64(b, te::ROWS, self.rows);
        put_u32(b, te::DIM, self.dim);
        b[te::ELEM] = self.elem as u8;
        b[te::INIT] = self.init as u8;
        b[te::OPTIMIZER] = self.optimizer as u8;
        put_u32(b, te::STATE_BYTES, self.state_bytes);
        put_u32(b, te::INIT_SCALE, self.init_scale.to_bits());
        put_u64(b, te::SEED, self.seed);
        put_u64(b, te::BASE_BLOCK, self.base_block);
        put_u64(b, te::BLOCK_COUNT, self.block_count);
        put_u32(b, te::ROW_BYTES, self.layout.row_bytes);
        put_u32(b, te::ROWS_PER_GROUP, self.layout.rows_per_group);
        put_u32(b, te::BLOCKS_PER_GROUP, self.layout.blocks_per_group);
        b[te::ROW_MAP] = self.layout.map as u8;
    }

    fn decode_from(b: &[u8], at: u64) -> Result<TableEntry, FormatError> {
        let bad = |field: &'static str, off: usize, value: String| FormatError::InvalidField {
            field,
            offset: at + off as u64,
            value,
        };
        let raw = &b[te::NAME..te::NAME + MAX_NAME_LEN];
        let len = raw.iter().position(|&c| c == 0).unwrap_or(MAX_NAME_LEN);
        // Zero padded, no NUL inside: "a\0c" is refused, not read as "a".
        if raw[len..].iter().any(|&c| c != 0) {
            return Err(bad(
                "name",
                te::NAME,
                format!("{:02x?}: bytes after the name's end are not zero", raw),
            ));
        }
        let name = std::str::from_utf8(&raw[..len])
            .map_err(|_| bad("name", te::NAME, format!("{:02x?}", &raw[..len])))?
            .to_string();
        if name.is_empty() {
            return Err(bad("name", te::NAME, "empty".into()));
        }
        let elem = ElemType::try_from(b[te::ELEM])
            .map_err(|v| bad("elem_type", te::ELEM, v.to_string()))?;
        let init =
            InitKind::try_from(b[te::INIT]).map_err(|v| bad("init", te::INIT, v.to_string()))?;
        let dim = get_u32(b, te::DIM);
        if dim == 0 || dim > MAX_DIM {
            return Err(bad("dim", te::DIM, format!("{dim}, not 1 ..= 2^20")));
        }
        let state_bytes = get_u32(b, te::STATE_BYTES);
        let optimizer = OptimizerCode::try_from(b[te::OPTIMIZER])
            .map_err(|v| bad("optimizer", te::OPTIMIZER, v.to_string()))?;
        if let Some(need) = optimizer.state_bytes(dim) {
            if need != state_bytes as u64 {
                return Err(bad(
                    "state_bytes",
                    te::STATE_BYTES,
                    format!("{state_bytes}, but {optimizer:?} at dim {dim} stores {need}"),
                ));
            }
        }
        let map = RowMap::try_from(b[te::ROW_MAP])
            .map_err(|v| bad("row_map", te::ROW_MAP, v.to_string()))?;
        let layout = RowLayout {
            row_bytes: get_u32(b, te::ROW_BYTES),
            rows_per_group: get_u32(b, te::ROWS_PER_GROUP),
            blocks_per_group: get_u32(b, te::BLOCKS_PER_GROUP),
            map,
        };
        let expect_rb = TableEntry::row_bytes_for(elem, dim, state_bytes);
        if layout.row_bytes as u64 != expect_rb
            || layout
                != (RowLayout {
                    map,
                    ..RowLayout::for_row_bytes(layout.row_bytes)
                })
        {
            return Err(bad("row_layout", te::ROW_BYTES, format!("{layout:?}")));
        }
        let rows = get_u64(b, te::ROWS);
        let block_count = get_u64(b, te::BLOCK_COUNT);
        // Checked: a crafted entry's rows x blocks_per_group can overflow
        // (found by the `catalog` fuzz target).
        if rows == 0 || layout.checked_blocks_for(rows) != Some(block_count) {
            return Err(bad(
                "block_count",
                te::BLOCK_COUNT,
                format!("{block_count} for {rows} rows"),
            ));
        }
        // A NaN or negative scale would give every never-written row
        // non-finite or nonsense values (found by the `catalog` fuzz target).
        let init_scale = f32::from_bits(get_u32(b, te::INIT_SCALE));
        if !(init_scale.is_finite() && init_scale >= 0.0) {
            return Err(bad("init_scale", te::INIT_SCALE, init_scale.to_string()));
        }
        Ok(TableEntry {
            name,
            rows,
            dim,
            elem,
            init,
            init_scale,
            seed: get_u64(b, te::SEED),
            state_bytes,
            optimizer,
            base_block: get_u64(b, te::BASE_BLOCK),
            block_count,
            layout,
        })
    }
}

/// The table catalog: fixed 128-byte entries, in table-id order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalog {
    /// The tables; a table's id is its index.
    pub tables: Vec<TableEntry>,
}

impl Catalog {
    /// Encode all entries.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.tables.len() * te::SIZE];
        for (i, t) in self.tables.iter().enumerate() {
            t.encode_into(&mut out[i * te::SIZE..(i + 1) * te::SIZE]);
        }
        out
    }

    /// Decode `count` entries from `bytes`, which start at byte `offset` of
    /// the file and must have CRC-32C `crc`.
    pub fn decode(bytes: &[u8], count: u32, offset: u64, crc: u32) -> Result<Catalog, FormatError> {
        let needed = count as u64 * te::SIZE as u64;
        if (bytes.len() as u64) < needed {
            return Err(FormatError::Truncated {
                offset,
                needed,
                have: bytes.len() as u64,
            });
        }
        let bytes = &bytes[..needed as usize];
        let computed = crc32c::crc32c(bytes);
        if computed != crc {
            return Err(FormatError::ChecksumMismatch {
                offset,
                stored: crc,
                computed,
            });
        }
        let mut tables = Vec::with_capacity(count as usize);
        let mut next_block = 0u64;
        for i in 0..count as usize {
            let at = offset + (i * te::SIZE) as u64;
            let e = TableEntry::decode_from(&bytes[i * te::SIZE..(i + 1) * te::SIZE], at)?;
            if e.base_block != next_block {
                return Err(FormatError::InvalidField {
                    field: "base_block",
                    offset: at + te::BASE_BLOCK as u64,
                    value: format!("{} (expected {next_block})", e.base_block),
                });
            }
            next_block = e.base_block.checked_add(e.block_count).ok_or_else(|| {
                FormatError::InvalidField {
                    field: "block_count",
                    offset: at + te::BLOCK_COUNT as u64,
                    value: e.block_count.to_string(),
                }
            })?;
            if tables.iter().any(|t: &TableEntry| t.name == e.name) {
                return Err(FormatError::InvalidField {
                    field: "name",
                    offset: at,
                    value: format!("duplicate table {:?}", e.name),
                });
            }
            tables.push(e);
        }
        Ok(Catalog { tables })
    }

    /// Blocks spanned by all tables.
    pub fn data_blocks(&self) -> u64 {
        self.tables
            .last()
            .map(|t| t.base_block + t.block_count)
            .unwrap_or(0)
    }
}
