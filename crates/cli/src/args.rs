//! A small getopt: ZFS's commands take clustered short flags (`-Hp`,
//! `-ddddd`), options with values (`-o a=b`, `-d DIR`) and positional
//! arguments, in any order before `--`.

use std::collections::HashMap;

/// A usage error: exit code 2.
#[derive(Debug)]
pub struct Usage(pub String);

/// Parsed arguments.
#[derive(Debug, Default)]
pub struct Args {
    /// Count of each flag seen.
    pub flags: HashMap<char, usize>,
    /// Values of each option, in order.
    pub opts: HashMap<char, Vec<String>>,
    pub pos: Vec<String>,
}

impl Args {
    /// Parse `argv` where `with_value` lists the option letters that take a value.
    pub fn parse(argv: &[String], flags: &str, with_value: &str) -> Result<Args, Usage> {
        let mut a = Args::default();
        let mut i = 0;
        while i < argv.len() {
            let s = &argv[i];
            if s == "--" {
                a.pos.extend(argv[i + 1..].iter().cloned());
                break;
            }
            if s.len() > 1 && s.starts_with('-') {
                let chars: Vec<char> = s[1..].chars().collect();
                let mut j = 0;
                while j < chars.len() {
                    let c = chars[j];
                    if with_value.contains(c) {
                        let rest: String = chars[j + 1..].iter().collect();
                        let v = if !rest.is_empty() {
                            rest
                        } else {
                            i += 1;
                            argv.get(i).cloned().ok_or_else(|| {
                                Usage(format!("missing argument for '-{c}' option"))
                            })?
                        };
                        a.opts.entry(c).or_default().push(v);
                        break;
                    } else if flags.contains(c) {
                        *a.flags.entry(c).or_default() += 1;
                    } else {
                        return Err(Usage(format!("invalid option '{c}'")));
                    }
                    j += 1;
                }
            } else {
                a.pos.push(s.clone());
            }
            i += 1;
        }
        Ok(a)
    }

    pub fn flag(&self, c: char) -> bool {
        self.flags.contains_key(&c)
    }

    pub fn count(&self, c: char) -> usize {
        self.flags.get(&c).copied().unwrap_or(0)
    }

    pub fn opt(&self, c: char) -> Option<&str> {
        self.opts.get(&c).and_then(|v| v.last()).map(|s| s.as_str())
    }

    pub fn opt_all(&self, c: char) -> Vec<String> {
        self.opts.get(&c).cloned().unwrap_or_default()
    }

    /// The `-o` field list of a `get` (`name,property,value,source` by
    /// default), lower-cased.
    pub fn fields(&self) -> Vec<String> {
        self.opt('o')
            .unwrap_or("name,property,value,source")
            .split(',')
            .map(|s| s.trim().to_lowercase())
            .collect()
    }

    /// Refuse the flags and options of `letters` that were given: OpenZFS
    /// has them, ozfs does not implement them yet, and a script must not
    /// believe they worked. `what` names the command ("cannot receive").
    pub fn refuse(&self, letters: &str, what: &str) -> Result<(), String> {
        let given = letters
            .chars()
            .find(|c| self.flag(*c) || self.opts.contains_key(c));
        match given {
            Some(c) => Err(format!("{what}: -{c} is not supported yet")),
            None => Ok(()),
        }
    }
}

/// How `ozfs cp` names a place in a dataset.
const CP_USAGE: &str = "usage: ozfs cp [-r] POOL/DATASET[@SNAP]:PATH DEST";

/// Split `POOL/DS[@SNAP]:PATH` into dataset and path.
pub fn split_source(s: &str) -> Result<(String, String), Usage> {
    let Some((ds, path)) = s.split_once(':') else {
        return Err(Usage(format!(
            "source '{s}' must be POOL/DATASET[@SNAP]:PATH\n{CP_USAGE}"
        )));
    };
    if ds.is_empty() {
        return Err(Usage(format!("source '{s}' has no dataset\n{CP_USAGE}")));
    }
    let path = if path.is_empty() {
        "/".to_string()
    } else {
        path.to_string()
    };
    Ok((ds.to_string(), path))
}
