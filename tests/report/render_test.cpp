// The renderers: every trial drawn once with its values, failed trials
// listed, strings from the store escaped in HTML and Markdown, nothing fetched.
#include "report/render.hpp"

#include <gtest/gtest.h>

#include "report/svg_plot.hpp"

namespace dnnlab::report {
namespace render_test {

Study hostile_study() {
  Study s;
  s.name = "<script>alert(1)</script>";
  s.depth_param = "depth";
  s.activation_param = "activation";
  s.families = {""};
  s.activations = {"relu", "<img src=x onerror=alert(2)>"};
  s.classes = 10;
  for (int i = 0; i < 6; ++i) {
    TrialRow t;
    t.id = 100 + i;
    t.index = i;
    t.depth = 1 << i;
    t.activation = s.activations[i % 2];
    t.status = i == 5 ? "failed" : i == 4 ? "pruned" : "finished";
    if (i != 5) t.accuracy = 0.5 + 0.01 * i;
    t.epochs = i == 4 ? 1 : 3;
    t.epoch_seconds = 0.1 * (i + 1);
    t.params = "depth=" + std::to_string(1 << i) + ", activation=" + t.activation;
    if (i == 5) t.error = "diverged: \"loss\" is <nan> & | more";
    s.trials.push_back(t);
  }
  return s;
}

TEST(ReportRender, HtmlDrawsEveryTrialAndEscapesStoreStrings) {
  const Study s = hostile_study();
  const std::string h = render_html(s, analyse(s));
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("<img"), std::string::npos);
  EXPECT_NE(h.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(h.find("diverged: &quot;loss&quot; is &lt;nan&gt; &amp; | more"), std::string::npos);
  // Five accuracy points, the pruned one hollow and titled with its epoch.
  std::size_t n = 0;
  for (std::size_t at = 0; (at = h.find("<circle class=\"pt ", at)) != std::string::npos; ++at) ++n;
  EXPECT_EQ(n, 5u + 6u);  // the accuracy figure; the time figure has the failed trial too
  EXPECT_NE(h.find("data-trial=\"104\" data-x=\"16\" data-y=\"0.54\""), std::string::npos) << h;
  EXPECT_NE(h.find("pruned at epoch 1"), std::string::npos);
  EXPECT_NE(h.find("<table class=\"failed\">"), std::string::npos);
}

TEST(ReportRender, MarkdownEscapesAndListsFailures) {
  const Study s = hostile_study();
  const std::string m = render_markdown(s, analyse(s));
  EXPECT_EQ(m.find("<script"), std::string::npos);
  EXPECT_EQ(m.find("<img"), std::string::npos);
  EXPECT_NE(m.find("| 105 | depth=32, activation=&lt;img src=x onerror=alert(2)&gt; | diverged: "
                   "\"loss\" is &lt;nan&gt; &amp; \\| more |"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("| 16 | 0.5400 |   |"), std::string::npos)
      << m;  // best per depth, by activation
}

TEST(ReportRender, SvgEscapesAndKeepsExactValues) {
  Plot p;
  p.title = "a \"b\" <c>";
  p.points.push_back({3, 0.123456789, 7, "finished", "#000", false, "t<1>"});
  const std::string svg = render_svg(p);
  EXPECT_NE(svg.find("data-trial=\"7\" data-x=\"3\" data-y=\"0.123456789\""), std::string::npos);
  EXPECT_NE(svg.find("a &quot;b&quot; &lt;c&gt;"), std::string::npos);
  EXPECT_NE(svg.find("<title>t&lt;1&gt;</title>"), std::string::npos);
}

// A 50,000-trial study's plots: dots in bulk, every point counted once, a
// few bytes each; small plots keep a circle and tooltip per trial.
TEST(ReportRender, ManyPointsAreDrawnInBulkAndCounted) {
  Plot p;
  p.title = "many";
  for (int i = 0; i < 2500; ++i)
    p.points.push_back({double(i % 8 + 1), 0.001 * (i % 900), i, i % 3 ? "pruned" : "finished",
                        series_color(i % 2), i % 3 != 0, "trial " + std::to_string(i)});
  const std::string svg = render_svg(p);
  EXPECT_EQ(svg.find("<circle"), std::string::npos);
  EXPECT_EQ(svg.find("<title>"), std::string::npos);
  std::size_t counted = 0, paths = 0;
  for (std::size_t at = 0; (at = svg.find("data-count=\"", at)) != std::string::npos; ++paths)
    counted += std::stoul(svg.substr(at += 12));
  EXPECT_EQ(counted, 2500u);
  EXPECT_EQ(paths, 4u);  // {finished, pruned} x two colours
  std::size_t dots = 0;
  for (std::size_t at = 0; (at = svg.find("h0", at)) != std::string::npos; ++at) ++dots;
  EXPECT_EQ(dots, 2500u);
  EXPECT_LT(svg.size(), 2500u * 20);
  EXPECT_NE(svg.find("2500 trials, drawn as dots"), std::string::npos);
  p.points.resize(2000);
  EXPECT_EQ(render_svg(p).find("<path class=\"pts"), std::string::npos);
}

TEST(ReportRender, OneAccuracyFigurePerFamilyAndTheGapInWords) {
  Study s;
  s.name = "fam";
  s.depth_param = "depth";
  s.family_param = "family";
  s.families = {"plain", "res<net>"};
  s.activations = {""};
  s.classes = 10;
  int id = 1;
  for (const std::string& f : s.families)
    for (double d : {1.0, 8.0, 64.0}) {
      TrialRow t;
      t.id = id++;
      t.family = f;
      t.depth = d;
      t.status = "finished";
      t.accuracy = f == "plain" && d == 64 ? 0.1 : 0.8;
      t.epoch_seconds = d;
      t.params = "family=" + f;
      s.trials.push_back(t);
    }
  const Analysis a = analyse(s);
  const std::string h = render_html(s, a);
  EXPECT_NE(h.find("id=\"accuracy-0\""), std::string::npos);
  EXPECT_NE(h.find("id=\"accuracy-1\""), std::string::npos);
  EXPECT_EQ(h.find("accuracy-2"), std::string::npos);
  EXPECT_EQ(h.find("res<net>"), std::string::npos);
  EXPECT_NE(h.find("family res&lt;net&gt;: against family plain, +0.7000 at depth 64"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("family plain: falls to chance (0.1000) from depth 64"), std::string::npos);
  const std::string m = render_markdown(s, a);
  EXPECT_NE(m.find("| res&lt;net&gt; | 1 | 0 | 1.0000 | 3 |"), std::string::npos) << m;  // its fit
}

}  // namespace render_test
}  // namespace dnnlab::report
