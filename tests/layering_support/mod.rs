//! Reading Rust source as text for `tests/layering.rs`: the code without comments, strings
//! and `#[cfg(test)]` items, and the `crate::…`/`super::…` paths it names.

/// The code of a file without comments, string literals and its `#[cfg(test)]` items.
pub fn production_code(text: &str) -> String {
    let mut code = String::new();
    let mut skipping = false;
    let mut depth = 0i32;
    for line in text.lines() {
        let line = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        let line = strip_strings(line);
        let trimmed = line.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            skipping = true;
            depth = 0;
            continue;
        }
        if skipping {
            // The item after the attribute: other attributes, then up to its `;` or its
            // closing brace.
            if trimmed.starts_with("#[") {
                continue;
            }
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if depth <= 0 && (trimmed.ends_with(';') || trimmed.ends_with('}')) {
                skipping = false;
            }
            continue;
        }
        code.push_str(&line);
        code.push('\n');
    }
    code
}

pub fn strip_strings(line: &str) -> String {
    let mut out = String::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in line.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// `crate::…` and `super::…` paths in `code`, with `use a::{b, c::d}` groups expanded into
/// `a::b` and `a::c::d`.
pub fn path_tokens(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_');
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        if starts_word && (rest.starts_with("crate::") || rest.starts_with("super::")) {
            let (paths, end) = read_path(&bytes, i);
            found.extend(paths);
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

/// Reads one path starting at `start`, expanding a trailing `{…}` group; the paths and the
/// index after them.
pub fn read_path(chars: &[char], start: usize) -> (Vec<String>, usize) {
    let mut i = start;
    let mut prefix = String::new();
    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
        prefix.push(chars[i]);
        i += 1;
    }
    if i < chars.len() && chars[i] == '{' && prefix.ends_with("::") {
        let mut depth = 0;
        let mut j = i;
        let mut inner = String::new();
        while j < chars.len() {
            match chars[j] {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            inner.push(chars[j]);
            j += 1;
            if depth == 0 {
                break;
            }
        }
        let inner = &inner[1..inner.len().saturating_sub(1)];
        let mut paths = Vec::new();
        for member in split_top_level(inner) {
            let member = member.trim();
            if member.is_empty() {
                continue;
            }
            let member: Vec<char> = format!("{prefix}{member}").chars().collect();
            paths.extend(read_path(&member, 0).0);
        }
        return (paths, j);
    }
    (vec![prefix.trim_end_matches(':').to_string()], i)
}

pub fn split_top_level(group: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0;
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}
