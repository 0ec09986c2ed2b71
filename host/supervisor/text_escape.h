#pragma once
// Text from configs, results files and plugins (labels, names, reasons) on
// its way into a CSV file, a Markdown table or a terminal: it can hold any
// bytes, and must not forge cells, rows, spreadsheet formulas or terminal
// escape sequences there.

#include <string>

namespace trainbench {

/// One CSV field per RFC 4180 (quoted, with doubled quotes, where it holds
/// a comma, a quote, CR or LF or starts or ends with a space), and never a
/// spreadsheet formula: a text starting with =, +, -, @, tab or CR gets a
/// leading apostrophe (OWASP's advice for CSV injection).
std::string CsvText(const std::string& text);

/// Text for one cell of a Markdown table: '|' escaped, control characters
/// (newlines and ESC among them) shown as '?'.
std::string MarkdownCell(const std::string& text);

/// Text for a terminal: C0 and C1 control characters and DEL shown as '?'
/// (no escape sequence of another's reaches the screen); other UTF-8 kept.
std::string Printable(const std::string& text);

}  // namespace trainbench
