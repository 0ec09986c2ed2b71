#include "text_escape.h"

namespace trainbench {

std::string Printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    // C1 controls (U+0080..U+009F) are 0xC2 0x80..0x9F in UTF-8; a lone 0x9B
    // is what some terminals still take as CSI.
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      out += '?';
      ++i;
    } else if (c < 0x20 || c == 0x7F ||
               (c >= 0x80 && c <= 0x9F && (i == 0 || static_cast<unsigned char>(text[i - 1]) < 0xC0))) {
      out += '?';
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string MarkdownCell(const std::string& text) {
  std::string out;
  for (const char c : Printable(text)) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string CsvText(const std::string& text) {
  std::string value = text;
  if (!value.empty() && std::string("=+-@\t\r").find(value.front()) != std::string::npos) value = "'" + value;
  const bool quote = value.find_first_of(",\"\r\n") != std::string::npos ||
                     (!value.empty() && (value.front() == ' ' || value.back() == ' '));
  if (!quote) return value;
  std::string quoted = "\"";
  for (const char c : value) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace trainbench
