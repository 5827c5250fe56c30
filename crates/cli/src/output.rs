//! Column output the way zfs/zpool print it: a header and padded columns,
//! or with `-H` tab-separated fields and no header.

/// Alignment of one column.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// Print rows under `headers`; `scripted` = `-H`.
pub fn print_table(headers: &[(&str, Align)], rows: &[Vec<String>], scripted: bool) {
    let mut out = String::new();
    if scripted {
        for r in rows {
            out.push_str(&r.join("\t"));
            out.push('\n');
        }
    } else {
        let mut w: Vec<usize> = headers.iter().map(|(h, _)| h.len()).collect();
        for r in rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        let line = |cells: Vec<&str>| -> String {
            let n = cells.len();
            let mut s = String::new();
            for (i, c) in cells.into_iter().enumerate() {
                let pad = w[i].saturating_sub(c.chars().count());
                let last = i + 1 == n;
                match headers[i].1 {
                    Align::Left if last => s.push_str(c),
                    Align::Left => {
                        s.push_str(c);
                        s.push_str(&" ".repeat(pad));
                    }
                    Align::Right => {
                        s.push_str(&" ".repeat(pad));
                        s.push_str(c);
                    }
                }
                if !last {
                    s.push_str("  ");
                }
            }
            s.trim_end().to_string()
        };
        out.push_str(&line(headers.iter().map(|(h, _)| *h).collect()));
        out.push('\n');
        for r in rows {
            out.push_str(&line(r.iter().map(|s| s.as_str()).collect()));
            out.push('\n');
        }
    }
    print!("{out}");
}

/// OpenZFS's JSON output (`-j`): `{"output_version": {...}, KEY: {...}}`.
pub fn json_doc(
    command: &str,
    key: &str,
    items: serde_json::Map<String, serde_json::Value>,
) -> String {
    serde_json::json!({
        "output_version": {"command": command, "vers_major": 0, "vers_minor": 1},
        key: items,
    })
    .to_string()
}

/// A property's value and source as OpenZFS's JSON gives them
/// (`{"value": …, "source": {"type": "LOCAL", "data": "-"}}`); `source` is
/// the text form (`-`, `default`, `local`, `inherited from X`, `received`).
pub fn json_prop(value: &str, source: &str) -> serde_json::Value {
    let (ty, data) = match source {
        "default" => ("DEFAULT", "-".to_string()),
        "local" => ("LOCAL", "-".to_string()),
        "received" => ("RECEIVED", "-".to_string()),
        s if s.starts_with("inherited from ") => {
            ("INHERITED", s["inherited from ".len()..].to_string())
        }
        _ => ("NONE", "-".to_string()),
    };
    serde_json::json!({"value": value, "source": {"type": ty, "data": data}})
}
