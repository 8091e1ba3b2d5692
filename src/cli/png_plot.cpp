#include "cli/png_plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>

#include "core/error.h"

namespace qwick {
namespace {

// ---- PNG -------------------------------------------------------------------------------------------
uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  std::vector<uint8_t> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  put_be32(out, crc32(body.data(), body.size()));
}

std::vector<uint8_t> encode_png(int w, int h, const std::vector<uint8_t>& rgb) {
  std::vector<uint8_t> raw;  // scanlines, each led by filter type 0 (none)
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + static_cast<ptrdiff_t>(y) * w * 3,
               rgb.begin() + static_cast<ptrdiff_t>(y + 1) * w * 3);
  }
  std::vector<uint8_t> z = {0x78, 0x01};  // zlib header: deflate, 32K window, no dictionary
  for (size_t i = 0; i < raw.size() || i == 0; i += 65535) {
    const size_t n = std::min<size_t>(65535, raw.size() - i);
    z.push_back(i + n >= raw.size() ? 1 : 0);  // BFINAL, BTYPE = 00 (stored)
    z.push_back(static_cast<uint8_t>(n)), z.push_back(static_cast<uint8_t>(n >> 8));
    z.push_back(static_cast<uint8_t>(~n)), z.push_back(static_cast<uint8_t>(~n >> 8));
    z.insert(z.end(), raw.begin() + static_cast<ptrdiff_t>(i), raw.begin() + static_cast<ptrdiff_t>(i + n));
  }
  uint32_t a = 1, b = 0;  // Adler-32 of the uncompressed stream
  for (uint8_t c : raw) a = (a + c) % 65521, b = (b + a) % 65521;
  put_be32(z, (b << 16) | a);

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, static_cast<uint32_t>(w));
  put_be32(ihdr, static_cast<uint32_t>(h));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, no filter, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  return png;
}

// ---- drawing ---------------------------------------------------------------------------------------
struct Rgb {
  uint8_t r, g, b;
};

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * h * 3, 255) {}
  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
    uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
    p[0] = c.r, p[1] = c.g, p[2] = c.b;
  }
  void line(int x0, int y0, int x1, int y1, Rgb c) {  // Bresenham
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    for (int err = dx + dy;;) {
      set(x0, y0, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  void box(int x, int y, int size, Rgb c) {
    for (int i = -size; i <= size; ++i)
      for (int j = -size; j <= size; ++j) set(x + i, y + j, c);
  }
  // 3×5 glyphs at 2× scale; returns the width drawn.
  int text(int x, int y, const std::string& s, Rgb c) {
    static const std::map<char, std::array<uint8_t, 5>> font = {
        {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 7, 1, 7}},
        {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 1, 1}},
        {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'A', {2, 5, 7, 5, 5}}, {'B', {6, 5, 6, 5, 6}},
        {'C', {3, 4, 4, 4, 3}}, {'D', {6, 5, 5, 5, 6}}, {'E', {7, 4, 6, 4, 7}}, {'F', {7, 4, 6, 4, 4}},
        {'G', {3, 4, 5, 5, 3}}, {'H', {5, 5, 7, 5, 5}}, {'I', {7, 2, 2, 2, 7}}, {'K', {5, 5, 6, 5, 5}},
        {'L', {4, 4, 4, 4, 7}}, {'M', {5, 7, 7, 5, 5}}, {'N', {6, 5, 5, 5, 5}}, {'O', {2, 5, 5, 5, 2}},
        {'P', {6, 5, 6, 4, 4}}, {'R', {6, 5, 6, 5, 5}}, {'S', {3, 4, 2, 1, 6}}, {'T', {7, 2, 2, 2, 2}},
        {'U', {5, 5, 5, 5, 7}}, {'V', {5, 5, 5, 5, 2}}, {'W', {5, 5, 7, 7, 5}}, {'X', {5, 5, 2, 5, 5}},
        {'Y', {5, 5, 2, 2, 2}}, {'/', {1, 1, 2, 4, 4}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
        {'(', {1, 2, 2, 2, 1}}, {')', {4, 2, 2, 2, 4}}, {':', {0, 2, 0, 2, 0}}};
    int cx = x;
    for (char ch : s) {
      const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (auto it = font.find(u); it != font.end())
        for (int row = 0; row < 5; ++row)
          for (int col = 0; col < 3; ++col)
            if (it->second[static_cast<size_t>(row)] & (4 >> col))
              for (int d = 0; d < 4; ++d) set(cx + 2 * col + d % 2, y + 2 * row + d / 2, c);
      cx += 8;
    }
    return cx - x;
  }
  int width() const { return w_; }
  int height() const { return h_; }
  const std::vector<uint8_t>& pixels() const { return px_; }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

std::string compact(double v) {
  char buf[32];
  if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3gK", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string length_label(double x) {
  const long long v = std::llround(x);
  return v >= 1024 && v % 1024 == 0 ? std::to_string(v / 1024) + "K" : std::to_string(v);
}

}  // namespace

void write_plot_png(const std::string& path, const std::vector<PlotPanel>& panels) {
  constexpr int kW = 520, kH = 340, kLeft = 70, kRight = 20, kTop = 40, kBottom = 40;
  const Rgb black{0, 0, 0}, grey{200, 200, 200};
  const std::array<Rgb, 4> colors = {Rgb{31, 119, 180}, Rgb{255, 127, 14}, Rgb{44, 160, 44},
                                     Rgb{214, 39, 40}};
  Canvas cv(kW * static_cast<int>(std::max<size_t>(panels.size(), 1)), kH);
  for (size_t p = 0; p < panels.size(); ++p) {
    const PlotPanel& panel = panels[p];
    const int x0 = static_cast<int>(p) * kW + kLeft, x1 = static_cast<int>(p + 1) * kW - kRight;
    const int y0 = kH - kBottom, y1 = kTop;  // y0 is the bottom edge
    double xmin = 1e300, xmax = -1e300, ymax = 0;
    for (const PlotSeries& s : panel.series)
      for (size_t i = 0; i < s.x.size(); ++i) {
        if (!(s.x[i] > 0) || !std::isfinite(s.y[i])) continue;
        xmin = std::min(xmin, std::log2(s.x[i]));
        xmax = std::max(xmax, std::log2(s.x[i]));
        ymax = std::max(ymax, s.y[i]);
      }
    if (xmin > xmax) xmin = 0, xmax = 1;
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax <= 0) ymax = 1;
    ymax *= 1.1;
    auto px = [&](double x) {
      return x0 + static_cast<int>((std::log2(x) - xmin) / (xmax - xmin) * (x1 - x0));
    };
    auto py = [&](double y) { return y0 - static_cast<int>(y / ymax * (y0 - y1)); };
    for (int i = 0; i <= 4; ++i) {  // horizontal grid and y labels
      const double v = ymax * i / 4;
      cv.line(x0, py(v), x1, py(v), grey);
      const std::string label = compact(v);
      cv.text(x0 - 8 - 8 * static_cast<int>(label.size()), py(v) - 5, label, black);
    }
    cv.line(x0, y0, x1, y0, black);
    cv.line(x0, y0, x0, y1, black);
    if (!panel.series.empty())
      for (double x : panel.series[0].x) {
        if (!(x > 0)) continue;
        cv.line(px(x), y0, px(x), y0 + 4, black);
        const std::string label = length_label(x);
        cv.text(px(x) - 4 * static_cast<int>(label.size()), y0 + 8, label, black);
      }
    cv.text(x0, 8, panel.title, black);
    int legend_x = x0;
    for (size_t s = 0; s < panel.series.size(); ++s) {
      const PlotSeries& series = panel.series[s];
      const Rgb c = colors[s % colors.size()];
      cv.box(legend_x + 4, 28, 3, c);
      legend_x += 12 + cv.text(legend_x + 12, 24, series.label, black) + 12;
      int last_x = -1, last_y = -1;
      for (size_t i = 0; i < series.x.size(); ++i) {
        if (!(series.x[i] > 0) || !std::isfinite(series.y[i])) continue;
        const int X = px(series.x[i]), Y = py(series.y[i]);
        if (last_x >= 0) cv.line(last_x, last_y, X, Y, c);
        cv.box(X, Y, 2, c);
        last_x = X, last_y = Y;
      }
    }
  }
  const std::vector<uint8_t> png = encode_png(cv.width(), cv.height(), cv.pixels());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  if (!out) fail("{}: cannot write the plot", path);
}

}  // namespace qwick
