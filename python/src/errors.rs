//! embtier errors as Python exceptions with the facts as attributes.

use super::*;

/// Raise the `embtier.errors` class `class` with `message` and `facts`.
pub(crate) fn raise(
    py: Python<'_>,
    class: &str,
    message: String,
    facts: &[(&str, Py<PyAny>)],
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let cls = py.import("embtier.errors")?.getattr(class)?;
        let kw = PyDict::new(py);
        for (k, v) in facts {
            kw.set_item(*k, v)?;
        }
        let e = cls.call((message.clone(),), Some(&kw))?;
        Ok(PyErr::from_value(e))
    })();
    made.unwrap_or_else(|e| e)
}

pub(crate) fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> Py<PyAny> {
    match v.into_pyobject(py) {
        Ok(o) => o.into_any().unbind(),
        Err(_) => py.None(),
    }
}

/// Map a store error to its Python exception, facts as attributes.
pub(crate) fn to_py(py: Python<'_>, e: embtier::Error) -> PyErr {
    use embtier::Error as E;
    let msg = e.to_string();
    let path = |p: &std::path::Path| obj(py, p.display().to_string());
    match &e {
        E::UnknownTable { name } => raise(
            py,
            "UnknownTableError",
            msg,
            &[("table", obj(py, name.as_str()))],
        ),
        E::StateLength {
            table, what, got, ..
        } => raise(
            py,
            "InvalidArgumentError",
            msg,
            &[
                ("table", obj(py, table.as_str())),
                ("argument", obj(py, *what)),
                ("got", obj(py, *got)),
            ],
        ),
        E::NegativeState {
            table,
            id,
            element,
            value,
        } => raise(
            py,
            "InvalidArgumentError",
            msg,
            &[
                ("table", obj(py, table.as_str())),
                ("argument", obj(py, "state")),
                ("id", obj(py, *id)),
                ("at", obj(py, *element)),
                ("got", obj(py, *value)),
            ],
        ),
        E::IdOutOfRange { table, id, rows } => raise(
            py,
            "IdOutOfRangeError",
            msg,
            &[
                ("table", obj(py, table.as_str())),
                ("id", obj(py, *id)),
                ("rows", obj(py, *rows)),
            ],
        ),
        E::LengthMismatch {
            table,
            what,
            got,
            expected,
            ..
        } => raise(
            py,
            "InvalidArgumentError",
            msg,
            &[
                ("table", obj(py, table.as_str())),
                ("argument", obj(py, *what)),
                ("got", obj(py, *got)),
                ("expected", obj(py, *expected)),
            ],
        ),
        E::NonFinite {
            table, what, id, ..
        } => raise(
            py,
            "InvalidArgumentError",
            msg,
            &[
                ("table", obj(py, table.as_str())),
                ("argument", obj(py, *what)),
                ("id", obj(py, *id)),
            ],
        ),
        E::BadOffsets { table, at, .. } => raise(
            py,
            "InvalidArgumentError",
            msg,
            &[
                ("table", obj(py, table.as_str())),
                ("argument", obj(py, "offsets")),
                ("at", obj(py, *at)),
            ],
        ),
        E::WeightsNeedSum { table, mode } => raise(
            py,
            "InvalidArgumentError",
            msg,
            &[
                ("table", obj(py, table.as_str())),
                ("argument", obj(py, "per_sample_weights")),
                ("mode", obj(py, *mode)),
            ],
        ),
        E::BadLearningRate { .. } => raise(py, "InvalidArgumentError", msg, &[]),
        // Their OSError bases' errno, as FileNotFoundError and
        // FileExistsError carry it (ENOENT, EEXIST: 2 and 17 on Linux).
        E::NotAStore { path: p, .. } => raise(
            py,
            "NotAStoreError",
            msg,
            &[("path", path(p)), ("errno", obj(py, 2i32))],
        ),
        E::AlreadyExists { path: p } => raise(
            py,
            "AlreadyExistsError",
            msg,
            &[("path", path(p)), ("errno", obj(py, 17i32))],
        ),
        E::Locked { path: p, pid } => raise(
            py,
            "LockedError",
            msg,
            &[("path", path(p)), ("pid", obj(py, *pid))],
        ),
        E::Format { path: p, source } => raise(
            py,
            "CorruptError",
            msg,
            &[("path", path(p)), ("offset", obj(py, source.offset()))],
        ),
        E::Corrupt {
            path: p,
            table,
            id,
            source,
        } => raise(
            py,
            "CorruptError",
            msg,
            &[
                ("path", path(p)),
                ("offset", obj(py, source.offset())),
                ("table", obj(py, table.as_str())),
                ("id", obj(py, *id)),
            ],
        ),
        E::DiskFull { path: p, offset } => raise(
            py,
            "DiskFullError",
            msg,
            &[
                ("path", path(p)),
                ("offset", obj(py, *offset)),
                ("errno", obj(py, libc_enospc())),
            ],
        ),
        // A full file system is a DiskFullError (a StorageError) whichever
        // call met it, so that `except DiskFullError` catches every one.
        E::MapReserve {
            path: p, source, ..
        } => raise(
            py,
            if source.raw_os_error() == Some(libc_enospc()) {
                "DiskFullError"
            } else {
                "StorageError"
            },
            msg,
            &[
                ("path", path(p)),
                ("offset", obj(py, 0u64)),
                ("errno", obj(py, source.raw_os_error())),
            ],
        ),
        E::Poisoned { .. } => raise(py, "PoisonedError", msg, &[]),
        E::Forked { pid } => raise(py, "ForkedError", msg, &[("pid", obj(py, *pid))]),
        E::Io {
            path: p,
            offset,
            source,
            ..
        } => raise(
            py,
            if source.raw_os_error() == Some(libc_enospc()) {
                "DiskFullError"
            } else {
                "StorageError"
            },
            msg,
            &[
                ("path", path(p)),
                ("offset", obj(py, *offset)),
                ("errno", obj(py, source.raw_os_error())),
            ],
        ),
        E::Config { reason, table } => {
            let mut attrs = vec![("reason", obj(py, reason.as_str()))];
            if let Some(t) = table {
                attrs.push(("table", obj(py, t.as_str())));
            }
            raise(py, "ConfigError", msg, &attrs)
        }
        E::TierTooSmall { table, .. }
        | E::Unsupported { table, .. }
        | E::ConfigMismatch { table, .. } => raise(
            py,
            "ConfigError",
            msg.clone(),
            &[("table", obj(py, table.as_str())), ("reason", obj(py, msg))],
        ),
        E::PrefetchPanicked { table } => {
            raise(py, "Error", msg, &[("table", obj(py, table.as_str()))])
        }
        _ => raise(py, "Error", msg, &[]),
    }
}

pub(crate) fn invalid(py: Python<'_>, argument: &str, message: String) -> PyErr {
    raise(
        py,
        "InvalidArgumentError",
        message,
        &[("argument", obj(py, argument))],
    )
}

/// An `ArgumentTypeError` (an `embtier.Error` and a `TypeError`) naming
/// `argument`: not an array, the wrong dtype, an array not readable in
/// place.
pub(crate) fn type_error(py: Python<'_>, argument: &str, message: String) -> PyErr {
    raise(
        py,
        "ArgumentTypeError",
        message,
        &[("argument", obj(py, argument))],
    )
}

/// ENOSPC, the errno of a full file system (28 on Linux and macOS).
fn libc_enospc() -> i32 {
    28
}
