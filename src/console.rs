//! What the binary prints: text from the input made safe for a terminal, results and errors.

use std::io::Write;

/// The error and its causes on one line, each cause once: the library's errors already end
/// with the OS error they wrap, which is also their `source` ("x: File exists: File exists").
pub(crate) fn message(err: &anyhow::Error) -> String {
    let mut msg = err.to_string();
    for cause in err.chain().skip(1) {
        let c = cause.to_string();
        if !msg.ends_with(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg.replace('\n', " ")
}

/// The console summary and where the files went, on stdout.
pub(crate) fn print_result(console: &str, out_dir: &std::path::Path) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(terminal_safe(console).as_bytes())?;
    writeln!(
        out,
        "\nwrote {}",
        terminal_safe(&out_dir.display().to_string())
    )?;
    out.flush()
}

/// Longest line printed, in characters.
const MAX_LINE: usize = 300;

/// Text from the input made safe for a terminal: control characters other than
/// tab and newline are dropped (an op name holding ESC sequences could clear the screen or
/// set the window title), and a line longer than [`MAX_LINE`] characters is cut with `…`
/// (a 1 MB op name printed whole).
pub(crate) fn terminal_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for (n, c) in line
            .chars()
            .filter(|&c| c == '\t' || !c.is_control())
            .enumerate()
        {
            if n == MAX_LINE - 1 {
                out.push('…');
                break;
            }
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue22_console_text_loses_control_characters_and_long_lines_are_cut() {
        let hostile = "peak at \x1b[2J\x1b]0;owned\x07aten::mm\tx\r\nnext";
        assert_eq!(
            terminal_safe(hostile),
            "peak at [2J]0;ownedaten::mm\tx\nnext"
        );
        let long = format!("peak allocated at {}", "a".repeat(1 << 20));
        let cut = terminal_safe(&format!("{long}\nend"));
        let first = cut.lines().next().unwrap();
        assert_eq!(first.chars().count(), MAX_LINE);
        assert!(first.ends_with('…'));
        assert!(cut.ends_with("\nend"));
    }
}
