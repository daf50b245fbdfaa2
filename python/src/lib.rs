//! `embtier._embtier`: the Python binding of the store (PyO3).
//!
//! Arrays come in as numpy arrays: values and gradients are read in
//! place, ids and offsets copied as they are read (`arrays::Ids`: another
//! thread must not change the ids a call checked); results are written
//! into a caller's `out` array or into a new one. Every call that reads, writes or computes releases the GIL. Errors
//! become the exceptions of `embtier.errors`, with the Rust error's facts
//! as attributes. The Python-facing docs live in `embtier/_embtier.pyi`.

use std::path::PathBuf;
use std::sync::Arc;

use embtier::{PooledBatch, PooledGrad, PoolingMode, Store, StoreConfig, TableBatch};
use numpy::{
    PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArray,
    PyUntypedArrayMethods,
};
use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::BoundObject;

mod arrays;
mod dicts;
mod errors;

use arrays::*;
use dicts::*;
use errors::*;

/// An open store. Share it between threads; close it (or leave the `with`
/// block) to release it.
#[pyclass(module = "embtier._embtier", name = "Store", frozen)]
struct PyStore {
    inner: RwLock<Option<Arc<Store>>>,
}

impl PyStore {
    /// `import_state`, or with `check` its checks alone.
    fn state_in(
        &self,
        py: Python<'_>,
        table: &str,
        start: i128,
        state: &Bound<'_, PyAny>,
        check: bool,
    ) -> PyResult<()> {
        let start = non_negative(py, "start", start)?;
        let s = self.get(py)?;
        let sb = s.state_bytes(table).map_err(|e| to_py(py, e))?;
        array(state, "state", 2)?;
        let a = state
            .cast::<PyArray2<u8>>()
            .map_err(|_| type_error(py, "state", "state: expected dtype uint8".to_string()))?;
        let r = a
            .try_readonly()
            .map_err(|e| type_error(py, "state", format!("state: {e}")))?;
        if r.shape()[1] != sb {
            return Err(invalid(
                py,
                "state",
                format!(
                    "state: expected {sb} bytes a row for table {table:?}, got {}",
                    r.shape()[1]
                ),
            ));
        }
        let v = r
            .as_slice()
            .expect("array() checked contiguous and aligned");
        py.detach(|| {
            if check {
                s.check_import_state(table, start, v)
            } else {
                s.import_state(table, start, v)
            }
        })
        .map_err(|e| to_py(py, e))
    }

    /// `import_rows`, or with `check` its checks alone.
    fn rows_in(
        &self,
        py: Python<'_>,
        table: &str,
        start: i128,
        values: &Bound<'_, PyAny>,
        check: bool,
    ) -> PyResult<()> {
        let start = non_negative(py, "start", start)?;
        let s = self.get(py)?;
        let dim = Self::dim(py, &s, table)?;
        let n = array(values, "values", 2)?.shape()[0];
        let v = f32_2d(values, "values", n, dim)?;
        let v = v
            .as_slice()
            .expect("array() checked contiguous and aligned");
        py.detach(|| {
            if check {
                s.check_import_rows(table, start, v)
            } else {
                s.import_rows(table, start, v)
            }
        })
        .map_err(|e| to_py(py, e))
    }
    fn get(&self, py: Python<'_>) -> PyResult<Arc<Store>> {
        let s = self
            .inner
            .read()
            .clone()
            .ok_or_else(|| raise(py, "ClosedError", "the store is closed".into(), &[]))?;
        // A forked copy (a DataLoader worker) takes no calls, those that
        // return no error in Rust (`stats`, `tables`) included.
        s.check_process().map_err(|e| to_py(py, e))?;
        Ok(s)
    }

    fn dim(py: Python<'_>, s: &Store, table: &str) -> PyResult<usize> {
        s.table_shape(table)
            .map(|(_, d)| d as usize)
            .map_err(|e| to_py(py, e))
    }

    /// A write of one row of `values` (`what`: its argument's name) per
    /// id, checked as `update` and `step` check them, then `call`ed with
    /// the GIL released.
    fn write_rows(
        &self,
        py: Python<'_>,
        table: &str,
        ids: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        what: &'static str,
        call: impl FnOnce(&Store, &str, &[u64], &[f32]) -> embtier::Result<()> + Send,
    ) -> PyResult<()> {
        let s = self.get(py)?;
        let dim = Self::dim(py, &s, table)?;
        let ids = self::ids(ids, "ids")?;
        let ids = ids.slice();
        let v = f32_2d(values, what, ids.len(), dim)?;
        let v = v
            .as_slice()
            .expect("array() checked contiguous and aligned");
        py.detach(|| call(&s, table, ids, v))
            .map_err(|e| to_py(py, e))
    }
}

/// Fill `out` (a writable, contiguous array: `out_2d`'s) by `fill`, with
/// the GIL released: a lookup's and an export's last step.
fn fill_out(
    py: Python<'_>,
    out: &Bound<'_, PyArray2<f32>>,
    fill: impl FnOnce(&mut [f32]) -> embtier::Result<()> + Send,
) -> PyResult<()> {
    let mut o = out
        .try_readwrite()
        .map_err(|e| type_error(py, "out", format!("out: {e}")))?;
    let o = o
        .as_slice_mut()
        .expect("array() checked contiguous and aligned");
    py.detach(|| fill(o)).map_err(|e| to_py(py, e))
}

/// The error of pickling or copying a store (with a model that holds one).
fn not_copied(py: Python<'_>) -> PyErr {
    type_error(
        py,
        "self",
        "an embtier Store cannot be pickled or copied: it holds its files open. \
         Save a model's weights with its state_dict (torch.save(model.state_dict(), ...)), \
         and in another process open the store again by its path (Store.open(path))"
            .to_string(),
    )
}

/// Rows `start .. start + count` within a table of `rows`, checked before
/// an array of `count` rows is made: a count past the table is the
/// store's `IdOutOfRangeError`, not numpy's error.
fn in_table(py: Python<'_>, table: &str, rows: u64, start: u64, count: u64) -> PyResult<()> {
    if count > 0 && start.checked_add(count).is_none_or(|e| e > rows) {
        let e = embtier::Error::IdOutOfRange {
            table: table.to_string(),
            // The first id of the range out of it, as the store says.
            id: start.max(rows),
            rows,
        };
        return Err(to_py(py, e));
    }
    Ok(())
}

fn config_from(py: Python<'_>, config: &Bound<'_, PyAny>) -> PyResult<StoreConfig> {
    if let Ok(d) = config.cast::<PyDict>() {
        // A dict with the schema of store.toml, read by the same serde
        // schema as store.toml but from its values directly, so that an
        // error names the dict's key (and its table), not a line of a
        // TOML text the caller never wrote.
        let json = config_value(py, d.as_any(), "config")?;
        return serde_path_to_error::deserialize::<_, StoreConfig>(&json).map_err(|e| {
            let (key, table) = dict_key(&json, e.path());
            config_error_in(py, &key, table.as_deref(), e.inner().to_string())
        });
    }
    let p: PathBuf = config.extract().map_err(|_| {
        type_error(
            py,
            "config",
            "config: expected a dict or the path of a store.toml".into(),
        )
    })?;
    let text = std::fs::read_to_string(&p).map_err(|e| {
        raise(
            py,
            "StorageError",
            format!("{}: {e}", p.display()),
            &[
                ("path", obj(py, p.display().to_string())),
                ("errno", obj(py, e.raw_os_error())),
            ],
        )
    })?;
    // A config error names the file it came from.
    StoreConfig::from_toml(&text).map_err(|e| match e {
        embtier::Error::Config { reason, table } => to_py(
            py,
            embtier::Error::Config {
                reason: format!("{}: {reason}", p.display()),
                table,
            },
        ),
        e => to_py(py, e),
    })
}

/// The key a deserialization error's `path` names, spelled as the dict
/// is indexed (`config["tables"][0]["rows"]`), and the name of the table
/// it is in, if it is in one that has a name.
fn dict_key(
    json: &serde_json::Value,
    path: &serde_path_to_error::Path,
) -> (String, Option<String>) {
    use serde_path_to_error::Segment;
    let mut key = String::from("config");
    let mut at = Some(json);
    let mut table = None;
    for (i, seg) in path.iter().enumerate() {
        match seg {
            Segment::Seq { index } => {
                key.push_str(&format!("[{index}]"));
                at = at.and_then(|v| v.get(*index));
                if i == 1 && key.starts_with("config[\"tables\"]") {
                    table = at
                        .and_then(|t| t.get("name"))
                        .and_then(|n| n.as_str())
                        .map(String::from);
                }
            }
            Segment::Map { key: k } => {
                key.push_str(&format!("[{k:?}]"));
                at = at.and_then(|v| v.get(k.as_str()));
            }
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    (key, table)
}

/// A ConfigError at `path` (the key, as `config["tables"][0]["rows"]`).
fn config_error(py: Python<'_>, path: &str, reason: String) -> PyErr {
    config_error_in(py, path, None, reason)
}

/// [`config_error`] in table `table`, where the key is one table's.
fn config_error_in(py: Python<'_>, path: &str, table: Option<&str>, reason: String) -> PyErr {
    let mut attrs = vec![("reason", obj(py, reason.as_str())), ("key", obj(py, path))];
    if let Some(t) = table {
        attrs.push(("table", obj(py, t)));
    }
    raise(py, "ConfigError", format!("{path}: {reason}"), &attrs)
}

/// A config dict's value `v` at `path` as a JSON value: what store.toml
/// holds (strings, numbers, booleans, lists and tables), numpy scalars
/// and arrays taken as the Python values they hold; anything else, and a number
/// that is not finite, a ConfigError naming the key.
fn config_value(py: Python<'_>, v: &Bound<'_, PyAny>, path: &str) -> PyResult<serde_json::Value> {
    use pyo3::types::{PyBool, PyFloat, PyInt, PyString, PyTuple};
    use serde_json::Value;
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(t) = v.cast::<PyString>() {
        return Ok(Value::String(t.to_cow()?.into_owned()));
    }
    if let Ok(i) = v.cast::<PyInt>() {
        if let Ok(n) = i.extract::<i64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = i.extract::<u64>() {
            return Ok(Value::from(n));
        }
        return Err(config_error(py, path, format!("{i} is out of range")));
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        let x = f.value();
        return serde_json::Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| config_error(py, path, format!("{x} is not a finite number")));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut m = serde_json::Map::new();
        for (k, x) in d.iter() {
            let Ok(k) = k.cast::<PyString>().map(|k| k.to_string()) else {
                return Err(config_error(
                    py,
                    path,
                    format!("key {} is not a string", k.repr()?),
                ));
            };
            let at = format!("{path}[{k:?}]");
            m.insert(k, config_value(py, &x, &at)?);
        }
        return Ok(Value::Object(m));
    }
    if v.cast::<PyList>().is_ok() || v.cast::<PyTuple>().is_ok() {
        let mut out = Vec::new();
        for (i, x) in v.try_iter()?.enumerate() {
            out.push(config_value(py, &x?, &format!("{path}[{i}]"))?);
        }
        return Ok(Value::Array(out));
    }
    // numpy scalars (numpy.int64(5), numpy.float32(0.1), numpy.bool_) and
    // arrays: the Python values they hold (`tolist`).
    let ty = v
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let is_numpy = v.get_type().module().is_ok_and(|m| m == "numpy");
    if is_numpy && v.hasattr("tolist")? {
        let plain = v.call_method0("tolist")?;
        if !plain.get_type().is(v.get_type()) {
            return config_value(py, &plain, path);
        }
    }
    Err(config_error(
        py,
        path,
        format!(
            "a {ty} is not a value store.toml holds (strings, numbers, booleans, lists and dicts)"
        ),
    ))
}

#[pymethods]
impl PyStore {
    /// Create a store in `path` (which must not exist, or be empty).
    ///
    /// `config` is a dict with the schema of `store.toml` (`tables`:
    /// a list of `{"name", "rows", "dim", ...}`; `dram`, `pmem`,
    /// `ssd` sections; see the Rust docs of `StoreConfig`) or the path
    /// of a `store.toml`. A failed create leaves nothing behind (but a
    /// tier file's `.lock` outside the store's directory).
    #[staticmethod]
    fn create(py: Python<'_>, path: PathBuf, config: &Bound<'_, PyAny>) -> PyResult<PyStore> {
        let cfg = config_from(py, config)?;
        let s = py
            .detach(|| Store::create(&path, cfg))
            .map_err(|e| to_py(py, e))?;
        Ok(PyStore {
            inner: RwLock::new(Some(Arc::new(s))),
        })
    }

    /// Open the store in `path`. Unless `cold`, the rows each cache tier
    /// held at the last checkpoint are read back in the background (a warm
    /// restart; see `wait_warm`).
    #[staticmethod]
    #[pyo3(signature = (path, cold = false))]
    fn open(py: Python<'_>, path: PathBuf, cold: bool) -> PyResult<PyStore> {
        let s = py
            .detach(|| {
                let opts = embtier::OpenOptionsExt {
                    cold,
                    ..Default::default()
                };
                Store::open_ext(&path, opts)
            })
            .map_err(|e| to_py(py, e))?;
        Ok(PyStore {
            inner: RwLock::new(Some(Arc::new(s))),
        })
    }

    /// Release the store, waiting for calls in flight (each holds the
    /// store while it runs, a `begin_checkpoint` until it is committed):
    /// once this returns, the store is closed and its lock released.
    /// With `keep`, `Store::close`: a checkpoint, and the tiers that live
    /// in files kept for the next open. Idempotent.
    #[pyo3(signature = (keep = false))]
    fn close(&self, py: Python<'_>, keep: bool) -> PyResult<()> {
        let Some(mut s) = self.inner.write().take() else {
            return Ok(());
        };
        // A forked copy (a DataLoader worker): the calls the opener had in
        // flight at the fork hold references that never go, and nothing
        // of the copy is this process's to close.
        if s.is_forked_copy() {
            std::mem::forget(s);
            return Ok(());
        }
        // Calls that began before the take hold their own reference; new
        // ones find the store closed. The wait is without the GIL, which
        // a call takes again before it returns.
        let store = py.detach(move || loop {
            match Arc::try_unwrap(s) {
                Ok(store) => return store,
                Err(held) => {
                    s = held;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        });
        match keep {
            true => py.detach(|| store.close()).map_err(|e| to_py(py, e)),
            false => {
                drop(store);
                Ok(())
            }
        }
    }

    /// Rows this open took back where they lay in file-backed tiers (a
    /// `close(keep=True)`'s, or a crash's by the slot stamps).
    #[getter]
    fn rows_kept_at_open(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.get(py)?.rows_kept_at_open())
    }

    /// How this open rebuilt the row log's map, as a dict: `blocks` (of
    /// the committed log), `from_index` (from the row-log index, without
    /// reading the log: after a crash or a plain close in the same boot),
    /// `index_refused` (why not, or None) and `seconds`.
    #[getter]
    fn row_log_at_open<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.get(py)?;
        let at = s.row_log_at_open();
        let d = PyDict::new(py);
        d.set_item("blocks", at.blocks)?;
        d.set_item("from_index", at.from_index)?;
        d.set_item("index_refused", at.index_refused.clone())?;
        d.set_item("seconds", at.seconds)?;
        Ok(d)
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().is_none()
    }

    /// A store is its open files and threads: it is not pickled or
    /// copied (with a model by `copy.deepcopy` or `torch.save(model)`).
    fn __reduce__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Err(not_copied(py))
    }

    fn __copy__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Err(not_copied(py))
    }

    fn __deepcopy__(&self, py: Python<'_>, _memo: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        Err(not_copied(py))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: &Bound<'_, PyAny>,
        _v: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.close(py, false)?;
        Ok(false)
    }

    /// Table names, in catalog order.
    #[getter]
    fn tables(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let s = self.get(py)?;
        Ok(s.table_names().map(str::to_owned).collect())
    }

    /// The store's directory.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.get(py)?.dir().display().to_string())
    }

    /// `(rows, dim)` of `table`.
    fn shape(&self, py: Python<'_>, table: &str) -> PyResult<(u64, usize)> {
        let s = self.get(py)?;
        s.table_shape(table)
            .map(|(r, d)| (r, d as usize))
            .map_err(|e| to_py(py, e))
    }

    /// Rows `ids` as a `(len(ids), dim)` float32 array. With `out`
    /// (C-contiguous float32 of that shape) the rows are written into it and
    /// it is returned: no allocation. Duplicate ids are allowed.
    #[pyo3(signature = (table, ids, out=None))]
    fn lookup<'py>(
        &self,
        py: Python<'py>,
        table: &str,
        ids: &Bound<'py, PyAny>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let s = self.get(py)?;
        let dim = Self::dim(py, &s, table)?;
        let ids = self::ids(ids, "ids")?;
        let ids = ids.slice();
        let out = out_2d(py, out, ids.len(), dim)?;
        fill_out(py, &out, |o| s.lookup(table, ids, o))?;
        Ok(out)
    }

    /// Lookups of several tables, their misses read in one queue:
    /// `batches` is a list of `(table, ids)`; returns one `(len(ids),
    /// dim)` array per batch. Every part is checked before any is read.
    fn lookup_many<'py>(
        &self,
        py: Python<'py>,
        batches: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyArray2<f32>>>> {
        let s = self.get(py)?;
        type Item<'py> = (String, Bound<'py, PyAny>);
        let items: Vec<Item<'py>> = batches_of(batches, "(table, ids)")?;
        let mut held = Vec::with_capacity(items.len());
        for (table, i) in &items {
            let dim = Self::dim(py, &s, table)?;
            let ids = ids(i, "ids")?;
            let out = zeros(py, ids.slice().len(), dim)?;
            held.push((table.as_str(), ids, out));
        }
        let mut outs: Vec<_> = held
            .iter()
            .map(|h| h.2.try_readwrite())
            .collect::<Result<_, _>>()
            .map_err(|e| type_error(py, "out", format!("out: {e}")))?;
        {
            let mut parts: Vec<TableBatch<'_>> = held
                .iter()
                .zip(outs.iter_mut())
                .map(|(h, o)| {
                    TableBatch::new(
                        h.0,
                        h.1.slice(),
                        o.as_slice_mut()
                            .expect("zeros() made it contiguous and aligned"),
                    )
                })
                .collect();
            py.detach(|| s.lookup_many(&mut parts))
                .map_err(|e| to_py(py, e))?;
        }
        drop(outs);
        Ok(held.into_iter().map(|h| h.2).collect())
    }

    /// Overwrite rows: row `ids[i]` becomes `values[i]` (shape
    /// `(len(ids), dim)`); for a duplicate id the last wins.
    fn update(
        &self,
        py: Python<'_>,
        table: &str,
        ids: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.write_rows(py, table, ids, values, "values", |s, t, i, v| {
            s.update(t, i, v)
        })
    }

    /// The table's fused optimizer step with `grads` (`(len(ids),
    /// dim)`); duplicate ids' gradients are summed in order, then applied
    /// once.
    fn step(
        &self,
        py: Python<'_>,
        table: &str,
        ids: &Bound<'_, PyAny>,
        grads: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.write_rows(py, table, ids, grads, "grads", |s, t, i, g| s.step(t, i, g))
    }

    /// Pooled embedding bags in FBGEMM's TBE layout: `offsets` has
    /// `B + 1` entries from 0 to `len(indices)`, bag `b` is
    /// `indices[offsets[b]:offsets[b+1]]`. Returns `(B, dim)`: each
    /// bag's sum (times `per_sample_weights`, sum mode only) or mean; an
    /// empty bag pools to zeros.
    #[pyo3(signature = (table, indices, offsets, mode="sum", per_sample_weights=None, out=None))]
    #[allow(clippy::too_many_arguments)]
    fn lookup_pooled<'py>(
        &self,
        py: Python<'py>,
        table: &str,
        indices: &Bound<'py, PyAny>,
        offsets: &Bound<'py, PyAny>,
        mode: &str,
        per_sample_weights: Option<&Bound<'py, PyAny>>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let s = self.get(py)?;
        let dim = Self::dim(py, &s, table)?;
        let m = self::mode(py, mode)?;
        let idx = ids(indices, "indices")?;
        let off = self::offsets(offsets)?;
        let w = per_sample_weights
            .map(|w| f32_1d(w, "per_sample_weights"))
            .transpose()?;
        let (idx, off) = (idx.slice(), off.slice());
        let w = w.as_ref().map(|w| {
            w.as_slice()
                .expect("array() checked contiguous and aligned")
        });
        let bags = off.len().saturating_sub(1);
        let out = out_2d(py, out, bags, dim)?;
        fill_out(py, &out, |o| s.lookup_pooled(table, idx, off, m, w, o))?;
        Ok(out)
    }

    /// The backward of `lookup_pooled` fused with the table's
    /// optimizer: every index receives its bag's gradient (`grad` is
    /// `(B, dim)`), times its weight or divided by the bag's length; the
    /// same as `step` with the expanded gradients, bit for bit.
    #[pyo3(signature = (table, indices, offsets, grad, mode="sum", per_sample_weights=None))]
    #[allow(clippy::too_many_arguments)]
    fn step_pooled(
        &self,
        py: Python<'_>,
        table: &str,
        indices: &Bound<'_, PyAny>,
        offsets: &Bound<'_, PyAny>,
        grad: &Bound<'_, PyAny>,
        mode: &str,
        per_sample_weights: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let s = self.get(py)?;
        let dim = Self::dim(py, &s, table)?;
        let m = self::mode(py, mode)?;
        let idx = ids(indices, "indices")?;
        let off = self::offsets(offsets)?;
        let w = per_sample_weights
            .map(|w| f32_1d(w, "per_sample_weights"))
            .transpose()?;
        let (idx, off) = (idx.slice(), off.slice());
        let bags = off.len().saturating_sub(1);
        let g = f32_2d(grad, "grad", bags, dim)?;
        let g = g
            .as_slice()
            .expect("array() checked contiguous and aligned");
        let w = w.as_ref().map(|w| {
            w.as_slice()
                .expect("array() checked contiguous and aligned")
        });
        py.detach(|| s.step_pooled(table, idx, off, g, m, w))
            .map_err(|e| to_py(py, e))
    }

    /// Pooled lookups of several tables, their misses read in one queue:
    /// `batches` is a list of `(table, indices, offsets, mode,
    /// per_sample_weights)`; returns one `(B, dim)` array per batch.
    fn lookup_pooled_many<'py>(
        &self,
        py: Python<'py>,
        batches: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyArray2<f32>>>> {
        let s = self.get(py)?;
        type Item<'py> = (
            String,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
            String,
            Option<Bound<'py, PyAny>>,
        );
        let items: Vec<Item<'py>> = batches_of(
            batches,
            "(table, indices, offsets, mode, per_sample_weights)",
        )?;
        let mut held = Vec::with_capacity(items.len());
        for (table, i, o, m, w) in &items {
            let dim = Self::dim(py, &s, table)?;
            let m = self::mode(py, m)?;
            let idx = ids(i, "indices")?;
            let off = offsets(o)?;
            let w = w
                .as_ref()
                .map(|w| f32_1d(w, "per_sample_weights"))
                .transpose()?;
            let bags = off.slice().len().saturating_sub(1);
            let out = zeros(py, bags, dim)?;
            held.push((table.as_str(), idx, off, m, w, out));
        }
        let mut outs: Vec<_> = held
            .iter()
            .map(|h| h.5.try_readwrite())
            .collect::<Result<_, _>>()
            .map_err(|e| type_error(py, "out", format!("out: {e}")))?;
        {
            let mut parts: Vec<PooledBatch<'_>> = held
                .iter()
                .zip(outs.iter_mut())
                .map(|(h, o)| PooledBatch {
                    table: h.0,
                    indices: h.1.slice(),
                    offsets: h.2.slice(),
                    mode: h.3,
                    per_sample_weights: h.4.as_ref().map(|w| {
                        w.as_slice()
                            .expect("array() checked contiguous and aligned")
                    }),
                    out: o
                        .as_slice_mut()
                        .expect("array() checked contiguous and aligned"),
                })
                .collect();
            py.detach(|| s.lookup_pooled_many(&mut parts))
                .map_err(|e| to_py(py, e))?;
        }
        drop(outs);
        Ok(held.into_iter().map(|h| h.5).collect())
    }

    /// Pooled steps of several tables: `batches` is a list of `(table,
    /// indices, offsets, grad, mode, per_sample_weights)`.
    fn step_pooled_many(&self, py: Python<'_>, batches: &Bound<'_, PyAny>) -> PyResult<()> {
        let s = self.get(py)?;
        type Item<'py> = (
            String,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
            String,
            Option<Bound<'py, PyAny>>,
        );
        let items: Vec<Item<'_>> = batches_of(
            batches,
            "(table, indices, offsets, grad, mode, per_sample_weights)",
        )?;
        let mut held = Vec::with_capacity(items.len());
        for (table, i, o, g, m, w) in &items {
            let dim = Self::dim(py, &s, table)?;
            let m = self::mode(py, m)?;
            let idx = ids(i, "indices")?;
            let off = offsets(o)?;
            let bags = off.slice().len().saturating_sub(1);
            let g = f32_2d(g, "grad", bags, dim)?;
            let w = w
                .as_ref()
                .map(|w| f32_1d(w, "per_sample_weights"))
                .transpose()?;
            held.push((table.as_str(), idx, off, g, m, w));
        }
        let parts: Vec<PooledGrad<'_>> = held
            .iter()
            .map(|h| PooledGrad {
                table: h.0,
                indices: h.1.slice(),
                offsets: h.2.slice(),
                grad: h
                    .3
                    .as_slice()
                    .expect("array() checked contiguous and aligned"),
                mode: h.4,
                per_sample_weights: h.5.as_ref().map(|w| {
                    w.as_slice()
                        .expect("array() checked contiguous and aligned")
                }),
            })
            .collect();
        py.detach(|| s.step_pooled_many(&parts))
            .map_err(|e| to_py(py, e))
    }

    /// Start reading `ids`' rows into DRAM and pin them there.
    fn prefetch(
        &self,
        py: Python<'_>,
        table: &str,
        ids: &Bound<'_, PyAny>,
    ) -> PyResult<PyPrefetch> {
        let s = self.get(py)?;
        let ids = self::ids(ids, "ids")?;
        let ids = ids.slice();
        let p = py
            .detach(|| s.prefetch_detached(table, ids))
            .map_err(|e| to_py(py, e))?;
        Ok(PyPrefetch {
            inner: Mutex::new(Some(p)),
        })
    }

    /// Rows `start .. start + count` of `table`, in id order.
    #[pyo3(signature = (table, start, count, out=None))]
    fn export_rows<'py>(
        &self,
        py: Python<'py>,
        table: &str,
        start: i128,
        count: i128,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let start = non_negative(py, "start", start)?;
        let count = usize::try_from(non_negative(py, "count", count)?).unwrap_or(usize::MAX);
        let s = self.get(py)?;
        let (rows, dim) = s.table_shape(table).map_err(|e| to_py(py, e))?;
        in_table(py, table, rows, start, count as u64)?;
        let out = out_2d(py, out, count, dim as usize)?;
        fill_out(py, &out, |o| s.export_rows(table, start, o))?;
        Ok(out)
    }

    /// Bytes of optimizer state a row of `table` holds (0 for SGD).
    fn state_bytes(&self, py: Python<'_>, table: &str) -> PyResult<usize> {
        let s = self.get(py)?;
        s.state_bytes(table).map_err(|e| to_py(py, e))
    }

    /// The optimizer state of rows `start .. start + count` of `table`, in
    /// id order: a uint8 array `(count, state_bytes)`, the bytes as a row
    /// holds them. A read: no row turns dirty.
    fn export_state<'py>(
        &self,
        py: Python<'py>,
        table: &str,
        start: i128,
        count: i128,
    ) -> PyResult<Bound<'py, PyArray2<u8>>> {
        let start = non_negative(py, "start", start)?;
        let count = non_negative(py, "count", count)?;
        let s = self.get(py)?;
        let (rows, _) = s.table_shape(table).map_err(|e| to_py(py, e))?;
        let sb = s.state_bytes(table).map_err(|e| to_py(py, e))?;
        in_table(py, table, rows, start, count)?;
        let out = PyArray2::<u8>::zeros(py, [count as usize, sb], false);
        {
            let mut o = out.try_readwrite().expect("a fresh array");
            let o = o.as_slice_mut().expect("a fresh array is contiguous");
            py.detach(|| s.export_state(table, start, o))
                .map_err(|e| to_py(py, e))?;
        }
        Ok(out)
    }

    /// Overwrite the optimizer state of rows `start .. start +
    /// len(state)` of `table` with `state` (uint8 `(n, state_bytes)`, as
    /// `export_state` gives it), leaving their weights.
    fn import_state(
        &self,
        py: Python<'_>,
        table: &str,
        start: i128,
        state: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.state_in(py, table, start, state, false)
    }

    /// Whether `import_state` would take `state`, writing nothing.
    fn check_import_state(
        &self,
        py: Python<'_>,
        table: &str,
        start: i128,
        state: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.state_in(py, table, start, state, true)
    }

    /// Overwrite rows `start .. start + len(values)` of `table`.
    fn import_rows(
        &self,
        py: Python<'_>,
        table: &str,
        start: i128,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.rows_in(py, table, start, values, false)
    }

    /// Whether `import_rows` would take `values`, writing nothing.
    fn check_import_rows(
        &self,
        py: Python<'_>,
        table: &str,
        start: i128,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.rows_in(py, table, start, values, true)
    }

    /// Make the current state durable and atomic; returns what it did.
    fn checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.get(py)?;
        let c = py.detach(|| s.checkpoint()).map_err(|e| to_py(py, e))?;
        checkpoint_dict(py, &c)
    }

    /// Begin a checkpoint and return once its moment has passed: it
    /// commits exactly the updates made before this returned, and is
    /// written and committed on a thread of its own while the caller
    /// trains on. Returns a `PendingCheckpoint`; its `wait()` returns what
    /// `checkpoint` returns.
    fn begin_checkpoint(&self, py: Python<'_>) -> PyResult<PyPendingCheckpoint> {
        let s = self.get(py)?;
        let (moment_tx, moment_rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("embtier-checkpoint".into())
            .spawn(move || {
                let begun = s.begin_checkpoint();
                let _ = moment_tx.send(());
                begun?.finish()
            })
            .map_err(|e| {
                raise(
                    py,
                    "Error",
                    format!("cannot start the checkpoint's thread: {e}"),
                    &[],
                )
            })?;
        // Its moment has passed (or it failed, which `wait` raises).
        py.detach(move || {
            let _ = moment_rx.recv();
        });
        Ok(PyPendingCheckpoint {
            job: Mutex::new(Job::Running(handle)),
            pid: std::process::id(),
        })
    }

    /// A checkpoint that also merges the row log into the tables whatever
    /// its fill: every logged row is written home and the log is emptied.
    /// Pay that cost when you choose (after a bulk `import_rows`, before
    /// copying the store) instead of inside a later checkpoint. Returns
    /// what `checkpoint` returns.
    fn merge_row_log<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.get(py)?;
        let c = py.detach(|| s.merge_row_log()).map_err(|e| to_py(py, e))?;
        checkpoint_dict(py, &c)
    }

    /// Wait until the warm restart's read-back has finished; returns the
    /// rows it read (0 when there was nothing to read back). The store
    /// serves calls while it runs.
    fn wait_warm(&self, py: Python<'_>) -> PyResult<u64> {
        let s = self.get(py)?;
        py.detach(|| s.wait_warm()).map_err(|e| to_py(py, e))
    }

    /// A checkpoint, for callers that need no report.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.get(py)?;
        py.detach(|| s.flush()).map_err(|e| to_py(py, e))
    }

    /// The store's figures, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.get(py)?;
        let st = py.detach(|| s.stats());
        stats_dict(py, &st)
    }

    /// Benchmark support: seconds for `iters` Rust-side lookups of `ids`
    /// (no Python in the loop), the baseline of the binding's own cost.
    fn _time_lookup(
        &self,
        py: Python<'_>,
        table: &str,
        ids: &Bound<'_, PyAny>,
        iters: usize,
    ) -> PyResult<f64> {
        let s = self.get(py)?;
        let dim = Self::dim(py, &s, table)?;
        let ids = self::ids(ids, "ids")?;
        let ids = ids.slice();
        let mut out = vec![0f32; ids.len() * dim];
        py.detach(|| {
            let t0 = std::time::Instant::now();
            for _ in 0..iters {
                s.lookup(table, ids, &mut out)?;
            }
            Ok(t0.elapsed().as_secs_f64())
        })
        .map_err(|e| to_py(py, e))
    }

    fn __repr__(&self) -> String {
        match &*self.inner.read() {
            Some(s) => format!("<embtier.Store {:?}>", s.dir()),
            None => "<embtier.Store (closed)>".into(),
        }
    }
}

/// A background read of rows into DRAM, pinned there until released.
#[pyclass(module = "embtier._embtier", name = "Prefetch", frozen)]
struct PyPrefetch {
    inner: Mutex<Option<embtier::Prefetch<'static>>>,
}

#[pymethods]
impl PyPrefetch {
    /// Wait for the reads; returns the rows pinned, raises what the
    /// reads raised.
    fn wait(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| match self.inner.lock().as_mut() {
            Some(p) => p.wait(),
            None => Ok(0),
        })
        .map_err(|e| to_py(py, e))
    }

    /// Release the pins (after the batch's step). Idempotent.
    fn release(&self, py: Python<'_>) {
        let p = self.inner.lock().take();
        py.detach(move || drop(p));
    }

    /// Whether the reads have finished.
    #[getter]
    fn done(&self) -> bool {
        self.inner.lock().as_ref().is_none_or(|p| p.is_finished())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: &Bound<'_, PyAny>,
        _v: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
        self.release(py);
        false
    }
}

/// A checkpoint being written and committed on a thread of its own (see
/// `Store.begin_checkpoint`).
#[pyclass(module = "embtier._embtier", name = "PendingCheckpoint", frozen)]
struct PyPendingCheckpoint {
    job: Mutex<Job>,
    /// The process whose thread runs it: a forked child has no such
    /// thread to join.
    pid: u32,
}

/// Where a `PendingCheckpoint`'s thread is.
enum Job {
    Running(std::thread::JoinHandle<embtier::Result<embtier::Checkpoint>>),
    /// Joined, its outcome not yet turned into Python's.
    Joined(std::thread::Result<embtier::Result<embtier::Checkpoint>>),
    Done(Result<embtier::Checkpoint, PyErr>),
    /// Between two of the above (never seen outside the lock).
    Moving,
}

#[pymethods]
impl PyPendingCheckpoint {
    /// Wait until the checkpoint is committed; returns what
    /// `Store.checkpoint` returns, raises what it raises. Idempotent.
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if std::process::id() != self.pid {
            return Err(to_py(py, embtier::Error::Forked { pid: self.pid }));
        }
        py.detach(|| {
            let mut job = self.job.lock();
            if matches!(*job, Job::Running(_)) {
                if let Job::Running(h) = std::mem::replace(&mut *job, Job::Moving) {
                    *job = Job::Joined(h.join());
                }
            }
        });
        let mut job = self.job.lock();
        let done = match std::mem::replace(&mut *job, Job::Moving) {
            Job::Joined(Ok(r)) => r.map_err(|e| to_py(py, e)),
            Job::Joined(Err(_)) => {
                let msg = "the checkpoint's thread panicked".to_string();
                Err(raise(py, "Error", msg, &[]))
            }
            Job::Done(d) => d,
            Job::Running(_) | Job::Moving => unreachable!("joined above"),
        };
        let out = match &done {
            Ok(c) => checkpoint_dict(py, c),
            Err(e) => Err(e.clone_ref(py)),
        };
        *job = Job::Done(done);
        out
    }

    /// Whether the checkpoint has finished (committed or failed).
    #[getter]
    fn done(&self) -> bool {
        match &*self.job.lock() {
            Job::Running(h) => h.is_finished(),
            _ => true,
        }
    }

    fn __repr__(&self) -> String {
        format!("<embtier.PendingCheckpoint done={}>", self.done())
    }
}

/// Make glibc's malloc give freed buffers of 128 KiB or more back to the
/// operating system at once (process-wide: the trainer's allocations too).
/// For a process that keeps to a hard memory limit with
/// `overhead_in_budget`; see `embtier::memory` and docs/tuning.md. Returns
/// whether it applied (glibc on Linux).
#[pyfunction]
fn give_back_freed_memory_promptly() -> bool {
    embtier::memory::give_back_freed_memory_promptly()
}

#[pymodule]
fn _embtier(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(give_back_freed_memory_promptly, m)?)?;
    m.add_class::<PyStore>()?;
    m.add_class::<PyPrefetch>()?;
    m.add_class::<PyPendingCheckpoint>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
