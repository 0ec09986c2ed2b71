// Labels, names and reasons can hold any bytes: in CSV, Markdown and on a
// terminal they must not forge cells, rows, formulas or escape sequences.
#include "text_escape.h"

#include <gtest/gtest.h>

namespace trainbench {
namespace {

TEST(TextEscape, CsvFieldsAreQuotedPerRfc4180AndNeverFormulas) {
  EXPECT_EQ(CsvText("simple_cnn"), "simple_cnn");
  EXPECT_EQ(CsvText("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvText("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvText("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvText(" padded "), "\" padded \"");
  EXPECT_EQ(CsvText("=HYPERLINK(\"http://x\",\"y\")"), "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\"");
  for (const char* formula : {"+1", "-1+2", "@SUM(A1)", "\tx", "\rx"}) {
    const std::string out = CsvText(formula);
    EXPECT_TRUE(out.rfind("'", 0) == 0 || out.rfind("\"'", 0) == 0) << formula << " -> " << out;
  }
  EXPECT_EQ(CsvText(""), "");
}

TEST(TextEscape, MarkdownCellsCannotForgeCellsOrRows) {
  EXPECT_EQ(MarkdownCell("resnet18"), "resnet18");
  EXPECT_EQ(MarkdownCell("a | 99999 | b"), "a \\| 99999 \\| b");
  EXPECT_EQ(MarkdownCell("x\n| forged | row |"), "x?\\| forged \\| row \\|");
}

TEST(TextEscape, TerminalsGetNoControlCharacters) {
  EXPECT_EQ(Printable("plain ÄÖ 日本"), "plain ÄÖ 日本");
  EXPECT_EQ(Printable("\x1b]0;title\x07red\x1b[31m"), "?]0;title?red?[31m");
  EXPECT_EQ(Printable("del\x7f"), "del?");
  EXPECT_EQ(Printable("c1 \xc2\x9b"
                      "31m"),
            "c1 ?31m");
  EXPECT_EQ(Printable("lone \x9b"), "lone ?");
}

}  // namespace
}  // namespace trainbench
