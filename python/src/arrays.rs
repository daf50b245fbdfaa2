//! numpy arguments read in place: ids, values and outputs checked for
//! dtype, layout and shape, with errors naming the argument.

use super::*;

/// A 1-D id array read in place: int64 or uint64, C-contiguous. int64 ids
/// are reinterpreted: a negative one reads as an id far out of range.
pub(crate) enum Ids<'py> {
    U(PyReadonlyArray1<'py, u64>),
    I(PyReadonlyArray1<'py, i64>),
}

impl Ids<'_> {
    pub(crate) fn slice(&self) -> &[u64] {
        match self {
            Ids::U(a) => a.as_slice().expect("checked contiguous"),
            Ids::I(a) => {
                let s = a.as_slice().expect("checked contiguous");
                // SAFETY: i64 and u64 have the same size and alignment, and
                // every bit pattern is a valid u64; the slice borrows the
                // same array for the same lifetime.
                unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u64>(), s.len()) }
            }
        }
    }
}

/// The array behind `a`, or a TypeError naming `arg` (not a numpy array,
/// wrong dimensions, not C-contiguous).
pub(crate) fn array<'a, 'py>(
    a: &'a Bound<'py, PyAny>,
    arg: &str,
    ndim: usize,
) -> PyResult<&'a Bound<'py, PyUntypedArray>> {
    let u = a.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{arg}: expected a numpy array, got {}",
            a.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
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

pub(crate) fn ids<'py>(a: &Bound<'py, PyAny>, arg: &str) -> PyResult<Ids<'py>> {
    let u = array(a, arg, 1)?;
    if let Ok(x) = a.cast::<PyArray1<u64>>() {
        return Ok(Ids::U(
            x.try_readonly()
                .map_err(|e| PyTypeError::new_err(format!("{arg}: {e}")))?,
        ));
    }
    if let Ok(x) = a.cast::<PyArray1<i64>>() {
        return Ok(Ids::I(
            x.try_readonly()
                .map_err(|e| PyTypeError::new_err(format!("{arg}: {e}")))?,
        ));
    }
    Err(PyTypeError::new_err(format!(
        "{arg}: expected dtype int64 or uint64, got {}",
        dtype_name(u)
    )))
}

pub(crate) fn f32_1d<'py>(
    a: &Bound<'py, PyAny>,
    arg: &str,
) -> PyResult<PyReadonlyArray1<'py, f32>> {
    let u = array(a, arg, 1)?;
    a.cast::<PyArray1<f32>>()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{arg}: expected dtype float32, got {}",
                dtype_name(u)
            ))
        })?
        .try_readonly()
        .map_err(|e| PyTypeError::new_err(format!("{arg}: {e}")))
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
            PyTypeError::new_err(format!(
                "{arg}: expected dtype float32, got {}",
                dtype_name(u)
            ))
        })?
        .try_readonly()
        .map_err(|e| PyTypeError::new_err(format!("{arg}: {e}")))
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
        None => Ok(PyArray2::<f32>::zeros(py, [rows, dim], false)),
        Some(a) => {
            let u = array(a, "out", 2)?;
            check_shape(u, "out", rows, dim)?;
            a.cast::<PyArray2<f32>>().cloned().map_err(|_| {
                PyTypeError::new_err(format!(
                    "out: expected dtype float32, got {}",
                    dtype_name(u)
                ))
            })
        }
    }
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
