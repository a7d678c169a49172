//! JSON values for the exports of served components, by their WIT types:
//! `bool` a JSON boolean; integers and floats JSON numbers (checked
//! against the type's range; floats come back exactly, a NaN or an
//! infinity has no JSON form); `char` and `string` JSON strings; `list<T>`
//! and tuples JSON arrays; a record a JSON object by field name; `option<T>`
//! `null` or the value; an `enum` its case's name; `flags` an array of
//! names; a `variant` `{"case": value}` (`{"case": null}` for a case
//! without a payload); a `result` `{"ok": value}` or `{"err": value}`.
//! Resources, futures and streams have no JSON form.

use serde_json::{Map, Value};
use wasmtime::component::{Type, Val};

/// `v` as a value of type `ty`, or what is wrong with it.
pub fn to_wit(ty: &Type, v: &Value) -> Result<Val, String> {
    let want = |what: &str| format!("expected {what}, got {v}");
    let int = || v.as_i64().ok_or_else(|| want("an integer"));
    let uint = || v.as_u64().ok_or_else(|| want("a non-negative integer"));
    let fit = |what: &str| format!("{v} does not fit in {what}");
    Ok(match ty {
        Type::Bool => Val::Bool(v.as_bool().ok_or_else(|| want("a boolean"))?),
        Type::S8 => Val::S8(i8::try_from(int()?).map_err(|_| fit("s8"))?),
        Type::S16 => Val::S16(i16::try_from(int()?).map_err(|_| fit("s16"))?),
        Type::S32 => Val::S32(i32::try_from(int()?).map_err(|_| fit("s32"))?),
        Type::S64 => Val::S64(int()?),
        Type::U8 => Val::U8(u8::try_from(uint()?).map_err(|_| fit("u8"))?),
        Type::U16 => Val::U16(u16::try_from(uint()?).map_err(|_| fit("u16"))?),
        Type::U32 => Val::U32(u32::try_from(uint()?).map_err(|_| fit("u32"))?),
        Type::U64 => Val::U64(uint()?),
        Type::Float32 => Val::Float32(v.as_f64().ok_or_else(|| want("a number"))? as f32),
        Type::Float64 => Val::Float64(v.as_f64().ok_or_else(|| want("a number"))?),
        Type::Char => {
            let s = v.as_str().ok_or_else(|| want("a one-character string"))?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => return Err(want("a one-character string")),
            }
        }
        Type::String => Val::String(v.as_str().ok_or_else(|| want("a string"))?.to_string()),
        Type::List(list) => {
            let items = v.as_array().ok_or_else(|| want("an array"))?;
            let ty = list.ty();
            Val::List(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| to_wit(&ty, item).map_err(|e| format!("item {i}: {e}")))
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Tuple(tuple) => {
            let items = v.as_array().ok_or_else(|| want("an array"))?;
            let types: Vec<Type> = tuple.types().collect();
            if items.len() != types.len() {
                return Err(want(&format!("an array of {}", types.len())));
            }
            Val::Tuple(
                types
                    .iter()
                    .zip(items)
                    .enumerate()
                    .map(|(i, (ty, item))| to_wit(ty, item).map_err(|e| format!("item {i}: {e}")))
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Record(record) => {
            let object = v.as_object().ok_or_else(|| want("an object"))?;
            let mut fields = Vec::new();
            for field in record.fields() {
                let value = object
                    .get(field.name)
                    .ok_or_else(|| format!("field `{}` missing in {v}", field.name))?;
                fields.push((
                    field.name.to_string(),
                    to_wit(&field.ty, value).map_err(|e| format!("field `{}`: {e}", field.name))?,
                ));
            }
            if let Some(extra) = object
                .keys()
                .find(|k| !fields.iter().any(|(name, _)| name == *k))
            {
                return Err(format!("no field `{extra}` in the record"));
            }
            Val::Record(fields)
        }
        Type::Option(option) => match v {
            Value::Null => Val::Option(None),
            some => Val::Option(Some(Box::new(to_wit(&option.ty(), some)?))),
        },
        Type::Enum(e) => {
            let name = v.as_str().ok_or_else(|| want("a case name"))?;
            if !e.names().any(|n| n == name) {
                return Err(format!("no case `{name}` in the enum"));
            }
            Val::Enum(name.to_string())
        }
        Type::Flags(flags) => {
            let names = v.as_array().ok_or_else(|| want("an array of flag names"))?;
            let mut set = Vec::new();
            for name in names {
                let name = name
                    .as_str()
                    .ok_or_else(|| want("an array of flag names"))?;
                if !flags.names().any(|n| n == name) {
                    return Err(format!("no flag `{name}`"));
                }
                set.push(name.to_string());
            }
            Val::Flags(set)
        }
        Type::Variant(variant) => {
            let (name, payload) = single(v).ok_or_else(|| want("an object of one case"))?;
            let case = variant
                .cases()
                .find(|c| c.name == name)
                .ok_or_else(|| format!("no case `{name}` in the variant"))?;
            let value = match (&case.ty, payload) {
                (None, Value::Null) => None,
                (None, other) => return Err(format!("case `{name}` has no payload, got {other}")),
                (Some(ty), payload) => Some(Box::new(to_wit(ty, payload)?)),
            };
            Val::Variant(name.to_string(), value)
        }
        Type::Result(result) => {
            let (name, payload) =
                single(v).ok_or_else(|| want("{\"ok\": ...} or {\"err\": ...}"))?;
            let ty = match name {
                "ok" => result.ok(),
                "err" => result.err(),
                _ => return Err(want("{\"ok\": ...} or {\"err\": ...}")),
            };
            let value = match (ty, payload) {
                (None, Value::Null) => None,
                (None, other) => return Err(format!("`{name}` has no payload, got {other}")),
                (Some(ty), payload) => Some(Box::new(to_wit(&ty, payload)?)),
            };
            Val::Result(if name == "ok" { Ok(value) } else { Err(value) })
        }
        other => return Err(format!("a {other:?} has no JSON form")),
    })
}

/// The one key of a JSON object and its value.
fn single(v: &Value) -> Option<(&str, &Value)> {
    let object = v.as_object()?;
    let mut entries = object.iter();
    match (entries.next(), entries.next()) {
        (Some((k, v)), None) => Some((k.as_str(), v)),
        _ => None,
    }
}

/// `v` as JSON (module docs), `None` where it has no JSON form.
pub fn from_wit(v: &Val) -> Option<Value> {
    let float = |x: f64| serde_json::Number::from_f64(x).map(Value::Number);
    Some(match v {
        Val::Bool(b) => Value::Bool(*b),
        Val::S8(x) => (*x).into(),
        Val::S16(x) => (*x).into(),
        Val::S32(x) => (*x).into(),
        Val::S64(x) => (*x).into(),
        Val::U8(x) => (*x).into(),
        Val::U16(x) => (*x).into(),
        Val::U32(x) => (*x).into(),
        Val::U64(x) => (*x).into(),
        Val::Float32(x) => float(f64::from(*x))?,
        Val::Float64(x) => float(*x)?,
        Val::Char(c) => Value::String(c.to_string()),
        Val::String(s) => Value::String(s.clone()),
        Val::List(items) | Val::Tuple(items) => {
            Value::Array(items.iter().map(from_wit).collect::<Option<_>>()?)
        }
        Val::Record(fields) => {
            let mut object = Map::new();
            for (name, value) in fields {
                object.insert(name.clone(), from_wit(value)?);
            }
            Value::Object(object)
        }
        Val::Option(None) => Value::Null,
        Val::Option(Some(value)) => from_wit(value)?,
        Val::Enum(name) => Value::String(name.clone()),
        Val::Flags(names) => Value::Array(names.iter().map(|n| Value::String(n.clone())).collect()),
        Val::Variant(name, value) => one(name, value.as_deref())?,
        Val::Result(Ok(value)) => one("ok", value.as_deref())?,
        Val::Result(Err(value)) => one("err", value.as_deref())?,
        _ => return None,
    })
}

/// `{name: value}` (`null` for no value).
fn one(name: &str, value: Option<&Val>) -> Option<Value> {
    let value = match value {
        Some(v) => from_wit(v)?,
        None => Value::Null,
    };
    Some(Value::Object(Map::from_iter([(name.to_string(), value)])))
}
