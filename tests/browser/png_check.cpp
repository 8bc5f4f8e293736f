// Is a PNG screenshot more than a blank page? Decodes 8-bit RGB or RGBA PNGs with zlib alone (no image
// library on a CI machine) and prints the size, the number of distinct colours and the share of pixels that
// differ from the most common one (the background). Exit status 0 when the image shows something: at least
// MIN_COLORS colours and MIN_INK of its pixels off the background; 1 when it looks blank; 2 when it cannot be
// read.
//   png_check FILE [MIN_COLORS [MIN_INK]]
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

std::uint32_t big_endian(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

int fail(const std::string& message) {
  std::fprintf(stderr, "png_check: %s\n", message.c_str());
  return 2;
}

int paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: png_check FILE [MIN_COLORS [MIN_INK]]");
  const std::size_t min_colors = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 16;
  const double min_ink = argc > 3 ? std::strtod(argv[3], nullptr) : 0.01;

  std::ifstream in(argv[1], std::ios::binary);
  if (!in) return fail(std::string("cannot open ") + argv[1]);
  const std::vector<unsigned char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (file.size() < 8 || !std::equal(signature, signature + 8, file.begin())) return fail("not a PNG file");

  std::uint32_t width = 0, height = 0;
  int channels = 0;
  std::vector<unsigned char> compressed;
  for (std::size_t at = 8; at + 12 <= file.size();) {
    const std::uint32_t length = big_endian(&file[at]);
    if (at + 12 + length > file.size()) return fail("truncated chunk");
    const std::string type(reinterpret_cast<const char*>(&file[at + 4]), 4);
    const unsigned char* data = &file[at + 8];
    if (type == "IHDR") {
      width = big_endian(data);
      height = big_endian(data + 4);
      const int depth = data[8], colour = data[9], interlace = data[12];
      if (depth != 8 || interlace != 0 || (colour != 2 && colour != 6)) {
        return fail("only 8-bit, non-interlaced RGB or RGBA PNGs are read");
      }
      channels = colour == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      compressed.insert(compressed.end(), data, data + length);
    } else if (type == "IEND") {
      break;
    }
    at += 12 + length;
  }
  if (width == 0 || height == 0 || channels == 0) return fail("no image header");

  const std::size_t stride = std::size_t{width} * static_cast<std::size_t>(channels);
  std::vector<unsigned char> raw((stride + 1) * height);
  uLongf raw_size = static_cast<uLongf>(raw.size());
  if (uncompress(raw.data(), &raw_size, compressed.data(), static_cast<uLong>(compressed.size())) != Z_OK ||
      raw_size != raw.size()) {
    return fail("the image data does not inflate to its size");
  }

  // Undo the per-row filters (PNG specification, section 9).
  std::vector<unsigned char> pixels(stride * height);
  for (std::size_t y = 0; y < height; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* line = &raw[y * (stride + 1) + 1];
    unsigned char* out = &pixels[y * stride];
    const unsigned char* up = y > 0 ? &pixels[(y - 1) * stride] : nullptr;
    for (std::size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<std::size_t>(channels) ? out[x - static_cast<std::size_t>(channels)] : 0;
      const int b = up != nullptr ? up[x] : 0;
      const int c =
          up != nullptr && x >= static_cast<std::size_t>(channels) ? up[x - static_cast<std::size_t>(channels)] : 0;
      int predicted = 0;
      // clang-format off
      switch (filter) {
        case 0: predicted = 0; break;
        case 1: predicted = a; break;
        case 2: predicted = b; break;
        case 3: predicted = (a + b) / 2; break;
        case 4: predicted = paeth(a, b, c); break;
        default: return fail("unknown row filter");
      }
      // clang-format on
      out[x] = static_cast<unsigned char>(line[x] + predicted);
    }
  }

  std::unordered_map<std::uint32_t, std::size_t> colours;
  for (std::size_t i = 0; i < pixels.size(); i += static_cast<std::size_t>(channels)) {
    const std::uint32_t rgb = (std::uint32_t{pixels[i]} << 16) | (std::uint32_t{pixels[i + 1]} << 8) | pixels[i + 2];
    ++colours[rgb];
  }
  std::size_t background = 0;
  for (const auto& [colour, count] : colours) background = std::max(background, count);
  const double total = static_cast<double>(width) * height;
  const double ink = 1.0 - static_cast<double>(background) / total;
  std::printf("%ux%u, %zu colours, %.2f%% of pixels off the background\n", width, height, colours.size(), ink * 100);
  const bool shows_something = colours.size() >= min_colors && ink >= min_ink;
  if (!shows_something) std::printf("png_check: the screenshot looks blank\n");
  return shows_something ? 0 : 1;
}
