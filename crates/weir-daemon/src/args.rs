//! Reading a request's `arguments` (`params`): each key in any of its
//! spellings, with Transmission's lenient types (0/1 for booleans, numbers
//! in strings for ratios) and a clear error for a value of the wrong type.
//! Unknown keys are ignored, as Transmission ignores them.

use serde_json::{Map, Value};

use crate::backend::{FileSet, LimitMode, Priority, Selection, TransferHash, TransferRef};
use crate::rpc::RpcError;

/// Most ids, labels or file indices one list argument may hold.
pub(crate) const MAX_LIST: usize = 100_000;

/// A request's arguments.
pub(crate) struct Args<'a> {
    map: &'a Map<String, Value>,
}

fn wrong(name: &str, expected: &str) -> RpcError {
    RpcError::invalid_params(format!("invalid argument '{name}': expected {expected}"))
}

impl<'a> Args<'a> {
    pub(crate) fn new(map: &'a Map<String, Value>) -> Self {
        Args { map }
    }

    /// The value under the first of `names` present, with the name used.
    pub(crate) fn get(&self, names: &[&'static str]) -> Option<(&'static str, &'a Value)> {
        names.iter().find_map(|n| self.map.get(*n).map(|v| (*n, v)))
    }

    pub(crate) fn bool(&self, names: &[&'static str]) -> Result<Option<bool>, RpcError> {
        let Some((n, v)) = self.get(names) else {
            return Ok(None);
        };
        match v {
            Value::Bool(b) => Ok(Some(*b)),
            Value::Number(x) if x.as_i64() == Some(0) => Ok(Some(false)),
            Value::Number(x) if x.as_i64() == Some(1) => Ok(Some(true)),
            Value::String(s) if s == "true" => Ok(Some(true)),
            Value::String(s) if s == "false" => Ok(Some(false)),
            _ => Err(wrong(n, "a boolean")),
        }
    }

    pub(crate) fn i64(&self, names: &[&'static str]) -> Result<Option<i64>, RpcError> {
        let Some((n, v)) = self.get(names) else {
            return Ok(None);
        };
        match v {
            Value::Number(x) => {
                if let Some(i) = x.as_i64() {
                    Ok(Some(i))
                } else if let Some(f) = x.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9e15) {
                    Ok(Some(f as i64))
                } else {
                    Err(wrong(n, "an integer"))
                }
            }
            Value::Bool(b) => Ok(Some(i64::from(*b))),
            _ => Err(wrong(n, "an integer")),
        }
    }

    /// A non-negative integer that fits `T`.
    pub(crate) fn uint<T: TryFrom<i64>>(
        &self,
        names: &[&'static str],
    ) -> Result<Option<T>, RpcError> {
        match self.i64(names)? {
            None => Ok(None),
            Some(i) => T::try_from(i).map(Some).map_err(|_| {
                wrong(
                    self.get(names).map_or("?", |x| x.0),
                    "a non-negative integer in range",
                )
            }),
        }
    }

    pub(crate) fn f64(&self, names: &[&'static str]) -> Result<Option<f64>, RpcError> {
        let Some((n, v)) = self.get(names) else {
            return Ok(None);
        };
        let f = match v {
            Value::Number(x) => x.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match f {
            Some(f) if f.is_finite() => Ok(Some(f)),
            _ => Err(wrong(n, "a number")),
        }
    }

    pub(crate) fn str(&self, names: &[&'static str]) -> Result<Option<&'a str>, RpcError> {
        match self.get(names) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s)),
            Some((n, _)) => Err(wrong(n, "a string")),
        }
    }

    pub(crate) fn strings(&self, names: &[&'static str]) -> Result<Option<Vec<String>>, RpcError> {
        let Some((n, v)) = self.get(names) else {
            return Ok(None);
        };
        let Value::Array(items) = v else {
            return Err(wrong(n, "an array of strings"));
        };
        if items.len() > MAX_LIST {
            return Err(wrong(n, "a shorter list"));
        }
        items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                _ => Err(wrong(n, "an array of strings")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    pub(crate) fn indices(&self, names: &[&'static str]) -> Result<Option<Vec<u32>>, RpcError> {
        let Some((n, v)) = self.get(names) else {
            return Ok(None);
        };
        let Value::Array(items) = v else {
            return Err(wrong(n, "an array of file indices"));
        };
        if items.len() > MAX_LIST {
            return Err(wrong(n, "a shorter list"));
        }
        items
            .iter()
            .map(|i| {
                i.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(|| wrong(n, "an array of file indices"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// A file list where `[]` means every file.
    pub(crate) fn file_set(&self, names: &[&'static str]) -> Result<Option<FileSet>, RpcError> {
        Ok(self.indices(names)?.map(|v| {
            if v.is_empty() {
                FileSet::All
            } else {
                FileSet::Indices(v)
            }
        }))
    }

    pub(crate) fn priority(&self, names: &[&'static str]) -> Result<Option<Priority>, RpcError> {
        match self.i64(names)? {
            None => Ok(None),
            Some(-1) => Ok(Some(Priority::Low)),
            Some(0) => Ok(Some(Priority::Normal)),
            Some(1) => Ok(Some(Priority::High)),
            Some(_) => Err(wrong(names[0], "-1, 0 or 1")),
        }
    }

    pub(crate) fn mode(&self, names: &[&'static str]) -> Result<Option<LimitMode>, RpcError> {
        match self.i64(names)? {
            None => Ok(None),
            Some(0) => Ok(Some(LimitMode::Global)),
            Some(1) => Ok(Some(LimitMode::Single)),
            Some(2) => Ok(Some(LimitMode::Unlimited)),
            Some(_) => Err(wrong(names[0], "0, 1 or 2")),
        }
    }

    /// The `ids` argument as a [`Selection`] (absent: all transfers).
    pub(crate) fn selection(&self) -> Result<Selection, RpcError> {
        let Some((n, v)) = self.get(&["ids"]) else {
            return Ok(Selection::All);
        };
        match v {
            Value::Number(_) => Ok(Selection::Refs(one_ref(v).into_iter().collect())),
            Value::String(s) if s == "recently-active" || s == "recently_active" => {
                Ok(Selection::RecentlyActive)
            }
            Value::String(_) => Ok(Selection::Refs(one_ref(v).into_iter().collect())),
            Value::Array(items) => {
                if items.len() > MAX_LIST {
                    return Err(wrong(n, "a shorter list"));
                }
                let mut refs = Vec::with_capacity(items.len());
                for i in items {
                    match i {
                        Value::Number(_) | Value::String(_) => refs.extend(one_ref(i)),
                        _ => return Err(wrong(n, "ids as numbers or hash strings")),
                    }
                }
                Ok(Selection::Refs(refs))
            }
            _ => Err(wrong(
                n,
                "a number, a hash string, a list of them or \"recently-active\"",
            )),
        }
    }
}

/// A number or hash string as a ref; anything that names no transfer
/// (a negative number, a string that is not a hash) is `None`, and the
/// transfer is simply not found, as in Transmission.
fn one_ref(v: &Value) -> Option<TransferRef> {
    match v {
        Value::Number(n) => n.as_u64().map(TransferRef::Id),
        Value::String(s) => TransferHash::parse_hex(s).map(TransferRef::Hash),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::ErrorKind;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn lenient_types() {
        let m = args(json!({"a": 1, "b": "false", "c": 2.0, "d": "1.5", "e": true}));
        let a = Args::new(&m);
        assert_eq!(a.bool(&["a"]).unwrap(), Some(true));
        assert_eq!(a.bool(&["b"]).unwrap(), Some(false));
        assert_eq!(a.i64(&["c"]).unwrap(), Some(2));
        assert_eq!(a.f64(&["d"]).unwrap(), Some(1.5));
        assert_eq!(a.i64(&["e"]).unwrap(), Some(1));
        assert_eq!(a.bool(&["missing"]).unwrap(), None);
    }

    #[test]
    fn wrong_types_are_invalid_params_naming_the_key() {
        let m = args(json!({"downloadLimit": "abc", "flag": 2, "l": [1], "neg": -5}));
        let a = Args::new(&m);
        let e = a.i64(&["downloadLimit"]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams);
        assert!(e.message.contains("downloadLimit"), "{}", e.message);
        assert_eq!(
            a.bool(&["flag"]).unwrap_err().kind,
            ErrorKind::InvalidParams
        );
        assert_eq!(
            a.strings(&["l"]).unwrap_err().kind,
            ErrorKind::InvalidParams
        );
        assert_eq!(
            a.uint::<u32>(&["neg"]).unwrap_err().kind,
            ErrorKind::InvalidParams
        );
    }

    #[test]
    fn ids_forms() {
        let h = "ab".repeat(20);
        let m = args(json!({"ids": [1, h, "junk", -3]}));
        let Selection::Refs(r) = Args::new(&m).selection().unwrap() else {
            panic!()
        };
        assert_eq!(r.len(), 2);
        assert_eq!(r[0], TransferRef::Id(1));
        let m = args(json!({"ids": "recently-active"}));
        assert_eq!(
            Args::new(&m).selection().unwrap(),
            Selection::RecentlyActive
        );
        let m = args(json!({"ids": 4}));
        assert_eq!(
            Args::new(&m).selection().unwrap(),
            Selection::Refs(vec![TransferRef::Id(4)])
        );
        let m = args(json!({}));
        assert_eq!(Args::new(&m).selection().unwrap(), Selection::All);
        let m = args(json!({"ids": {"a": 1}}));
        assert_eq!(
            Args::new(&m).selection().unwrap_err().kind,
            ErrorKind::InvalidParams
        );
        let m = args(json!({"ids": [[1]]}));
        assert!(Args::new(&m).selection().is_err());
    }

    #[test]
    fn empty_file_list_means_all() {
        let m = args(json!({"files-wanted": [], "priority-high": [0, 2]}));
        let a = Args::new(&m);
        assert_eq!(a.file_set(&["files-wanted"]).unwrap(), Some(FileSet::All));
        assert_eq!(
            a.file_set(&["priority-high"]).unwrap(),
            Some(FileSet::Indices(vec![0, 2]))
        );
    }
}
