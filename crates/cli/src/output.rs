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
