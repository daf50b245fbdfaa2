//! numpy arguments read in place: ids, values and outputs checked for
//! dtype, layout and shape, with errors naming the argument.

use super::*;

/// A 1-D id array (int64 or uint64, C-contiguous), copied as it is read:
/// the store addresses its files by these ids after it has checked them,
/// while the GIL is released, so a copy is what another thread cannot
/// change between the check and the use (8 bytes an id). int64 ids are
/// reinterpreted: a negative one reads as an id far out of range.
pub(crate) struct Ids(Vec<u64>);

impl Ids {
    pub(crate) fn slice(&self) -> &[u64] {
        &self.0
    }
}

/// The elements of `a`, a 1-D array [`array`] checked (C-contiguous and
/// aligned), or a TypeError naming `arg`. (The other arguments' slices
/// are taken with `expect`: [`array`] checked what `as_slice` needs.)
fn elements<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>, arg: &str) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|e| type_error(a.py(), arg, format!("{arg}: {e}")))
}

/// The array behind `a`, or a TypeError naming `arg` (not a numpy array,
/// wrong dimensions, not C-contiguous).
pub(crate) fn array<'a, 'py>(
    a: &'a Bound<'py, PyAny>,
    arg: &str,
    ndim: usize,
) -> PyResult<&'a Bound<'py, PyUntypedArray>> {
    let u = a.cast::<PyUntypedArray>().map_err(|_| {
        type_error(
            a.py(),
            arg,
            format!(
                "{arg}: expected a numpy array, got {}",
                a.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ),
        )
    })?;
    if u.ndim() != ndim {
        return Err(invalid(
            a.py(),
            arg,
            format!("{arg}: expected {ndim}-D, got shape {:?}", u.shape()),
        ));
    }
    if !u.is_c_contiguous() {
        return Err(invalid(
            a.py(),
            arg,
            format!("{arg}: must be C-contiguous (use numpy.ascontiguousarray)"),
        ));
    }
    if !u.is_aligned() {
        // numpy.frombuffer at an odd offset, for one: its elements cannot
        // be read in place.
        return Err(invalid(
            a.py(),
            arg,
            format!(
                "{arg}: must be aligned to its dtype (use numpy.require(a, requirements=\"CA\"))"
            ),
        ));
    }
    Ok(u)
}

/// An InvalidArgumentError unless `u` is `(rows, dim)`.
pub(crate) fn check_shape(
    u: &Bound<'_, PyUntypedArray>,
    arg: &str,
    rows: usize,
    dim: usize,
) -> PyResult<()> {
    if u.shape() == [rows, dim] {
        return Ok(());
    }
    let py = u.py();
    Err(raise(
        py,
        "InvalidArgumentError",
        format!("{arg}: expected shape ({rows}, {dim}), got {:?}", u.shape()),
        &[
            ("argument", obj(py, arg)),
            ("expected", obj(py, rows * dim)),
            ("got", obj(py, u.len())),
        ],
    ))
}

pub(crate) fn dtype_name(u: &Bound<'_, PyUntypedArray>) -> String {
    u.dtype().to_string()
}

pub(crate) fn ids(a: &Bound<'_, PyAny>, arg: &str) -> PyResult<Ids> {
    let u = array(a, arg, 1)?;
    if let Ok(x) = a.cast::<PyArray1<u64>>() {
        let r = x
            .try_readonly()
            .map_err(|e| type_error(a.py(), arg, format!("{arg}: {e}")))?;
        return Ok(Ids(elements(&r, arg)?.to_vec()));
    }
    if let Ok(x) = a.cast::<PyArray1<i64>>() {
        let r = x
            .try_readonly()
            .map_err(|e| type_error(a.py(), arg, format!("{arg}: {e}")))?;
        return Ok(Ids(elements(&r, arg)?.iter().map(|&i| i as u64).collect()));
    }
    Err(type_error(
        a.py(),
        arg,
        format!(
            "{arg}: expected dtype int64 or uint64, got {}",
            dtype_name(u)
        ),
    ))
}

/// A pooled call's `offsets`: [`ids`], refusing a negative entry by its
/// position (read as an id, -1 was 2^64 - 1, "below the one before it"
/// one entry late).
pub(crate) fn offsets(a: &Bound<'_, PyAny>) -> PyResult<Ids> {
    if let Ok(x) = a.cast::<PyArray1<i64>>() {
        if let Ok(r) = x.try_readonly() {
            if let Some((at, &v)) = r
                .as_slice()
                .ok()
                .and_then(|v| v.iter().enumerate().find(|(_, &v)| v < 0))
            {
                return Err(crate::errors::raise(
                    a.py(),
                    "InvalidArgumentError",
                    format!("offsets: entry {at} is {v}; an offset cannot be negative"),
                    &[
                        ("argument", crate::errors::obj(a.py(), "offsets")),
                        ("at", crate::errors::obj(a.py(), at)),
                        ("got", crate::errors::obj(a.py(), v)),
                    ],
                ));
            }
        }
    }
    ids(a, "offsets")
}

/// `v` as a u64 (past it, `u64::MAX`: out of any table's range), or an
/// `InvalidArgumentError` naming `arg` where it is negative (PyO3 raised a
/// bare `OverflowError` for both).
pub(crate) fn non_negative(py: Python<'_>, arg: &str, v: i128) -> PyResult<u64> {
    if v > u64::MAX as i128 {
        return Ok(u64::MAX);
    }
    u64::try_from(v).map_err(|_| {
        crate::errors::raise(
            py,
            "InvalidArgumentError",
            format!("{arg}: {v} is negative"),
            &[
                ("argument", crate::errors::obj(py, arg)),
                ("got", crate::errors::obj(py, v)),
            ],
        )
    })
}

/// The `batches` of a `*_many` call: a list of tuples of the shape
/// `shape` names, or an `ArgumentTypeError` naming it (PyO3 raised a bare
/// `TypeError` or `ValueError`).
pub(crate) fn batches_of<'py, T: FromPyObjectOwned<'py>>(
    batches: &Bound<'py, PyAny>,
    shape: &str,
) -> PyResult<Vec<T>> {
    batches.extract().map_err(|e| {
        type_error(
            batches.py(),
            "batches",
            format!("batches: expected a list of {shape} tuples ({e})"),
        )
    })
}

pub(crate) fn f32_1d<'py>(
    a: &Bound<'py, PyAny>,
    arg: &str,
) -> PyResult<PyReadonlyArray1<'py, f32>> {
    let u = array(a, arg, 1)?;
    a.cast::<PyArray1<f32>>()
        .map_err(|_| {
            type_error(
                a.py(),
                arg,
                format!("{arg}: expected dtype float32, got {}", dtype_name(u)),
            )
        })?
        .try_readonly()
        .map_err(|e| type_error(a.py(), arg, format!("{arg}: {e}")))
}

/// A `(rows, dim)` float32 array, read in place.
pub(crate) fn f32_2d<'py>(
    a: &Bound<'py, PyAny>,
    arg: &str,
    rows: usize,
    dim: usize,
) -> PyResult<PyReadonlyArray2<'py, f32>> {
    let u = array(a, arg, 2)?;
    check_shape(u, arg, rows, dim)?;
    a.cast::<PyArray2<f32>>()
        .map_err(|_| {
            type_error(
                a.py(),
                arg,
                format!("{arg}: expected dtype float32, got {}", dtype_name(u)),
            )
        })?
        .try_readonly()
        .map_err(|e| type_error(a.py(), arg, format!("{arg}: {e}")))
}

/// The caller's `out` (checked: float32, C-contiguous, `(rows, dim)`,
/// writable) or a new zeroed array.
pub(crate) fn out_2d<'py>(
    py: Python<'py>,
    out: Option<&Bound<'py, PyAny>>,
    rows: usize,
    dim: usize,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    match out {
        None => zeros(py, rows, dim),
        Some(a) => {
            let u = array(a, "out", 2)?;
            check_shape(u, "out", rows, dim)?;
            a.cast::<PyArray2<f32>>().cloned().map_err(|_| {
                type_error(
                    py,
                    "out",
                    format!("out: expected dtype float32, got {}", dtype_name(u)),
                )
            })
        }
    }
}

/// A new zeroed `(rows, dim)` float32 array, made by `numpy.zeros`: a
/// size numpy cannot allocate raises its MemoryError (or ValueError), not
/// a panic.
pub(crate) fn zeros(py: Python<'_>, rows: usize, dim: usize) -> PyResult<Bound<'_, PyArray2<f32>>> {
    let np = py.import("numpy")?;
    let a = np
        .getattr("zeros")?
        .call1(((rows, dim), np.getattr("float32")?))?;
    a.cast_into::<PyArray2<f32>>()
        .map_err(|e| PyTypeError::new_err(format!("numpy.zeros: {e}")))
}

pub(crate) fn mode(py: Python<'_>, m: &str) -> PyResult<PoolingMode> {
    m.parse::<PoolingMode>().map_err(|_| {
        invalid(
            py,
            "mode",
            format!("mode: expected \"sum\" or \"mean\", got {m:?}"),
        )
    })
}
