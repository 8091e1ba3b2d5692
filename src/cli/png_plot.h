// A small line chart written as a PNG with no image library: RGB pixels, stored (uncompressed)
// deflate blocks in the zlib stream, CRC-32 per chunk and Adler-32 over the pixels, which is all
// the format requires. Labels use a built-in 3×5 pixel font (digits, capitals, a few signs).
#pragma once

#include <string>
#include <vector>

namespace qwick {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;  // x on a log2 axis, y linear from 0
};

struct PlotPanel {
  std::string title;  // e.g. "PREFILL TOKENS/S"
  std::vector<PlotSeries> series;
};

// Panels side by side, each with its own y range; throws Error when the file cannot be written.
void write_plot_png(const std::string& path, const std::vector<PlotPanel>& panels);

}  // namespace qwick
