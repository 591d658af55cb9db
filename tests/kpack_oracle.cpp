// kpack_oracle: ask rocm-kpack's reference runtime which code object a GPU would load.
//
// Reads requests from stdin, one per line: BINARY<TAB>ISA<TAB>CO_INDEX. For each, reads the
// `.rocm_kpack_ref` section of BINARY (ELF64), calls kpack_load_code_object() with a fresh
// cache and arch_list {ISA}, and prints one line:
//   CODE<TAB>SIZE<TAB>SHA256<TAB>ARCHIVE<TAB>TARGET<TAB>TRIED
// CODE is the kpack_error_t (0 = loaded; SIZE/SHA256 then describe the code object, else 0/-),
// ARCHIVE/TARGET are the archive and architecture the kernel was loaded from, or the first
// candidate asked when none held it, and TRIED every candidate asked, in order, as
// ARCHIVE@TARGET joined by `|` (from its ROCM_KPACK_DEBUG lines; `-` when none).
// CODE -1: BINARY has no readable marker.
// The environment overrides (ROCM_KPACK_PATH...) are cleared so only the marker counts.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "rocm_kpack/kpack.h"

namespace {

// ---- SHA-256 (FIPS 180-4), enough to fingerprint a code object --------------------------
const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

std::string sha256(const uint8_t* data, size_t size) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::vector<uint8_t> msg(data, data + size);
  msg.push_back(0x80);
  while (msg.size() % 64 != 56) msg.push_back(0);
  uint64_t bits = static_cast<uint64_t>(size) * 8;
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  for (size_t chunk = 0; chunk < msg.size(); chunk += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      const uint8_t* p = &msg[chunk + 4 * i];
      w[i] = (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
    }
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return std::string(out, 64);
}

// ---- the marker section of an ELF64 little-endian file ----------------------------------
template <typename T>
bool get(const std::string& buf, size_t at, T* out) {
  if (at > buf.size() || buf.size() - at < sizeof(T)) return false;
  std::memcpy(out, buf.data() + at, sizeof(T));
  return true;
}

bool read_marker(const std::string& path, std::string* marker) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string buf = ss.str();
  if (buf.size() < 64 || buf.compare(0, 4, "\x7f" "ELF") != 0 || buf[4] != 2 || buf[5] != 1) return false;
  uint64_t shoff;
  uint16_t shentsize, shnum, shstrndx;
  if (!get(buf, 0x28, &shoff) || !get(buf, 0x3a, &shentsize) || !get(buf, 0x3c, &shnum) ||
      !get(buf, 0x3e, &shstrndx) || shentsize < 64 || shstrndx >= shnum)
    return false;
  uint64_t str_off;
  if (!get(buf, shoff + uint64_t(shstrndx) * shentsize + 0x18, &str_off)) return false;
  for (uint16_t i = 0; i < shnum; ++i) {
    size_t sh = shoff + size_t(i) * shentsize;
    uint32_t name;
    uint64_t off, size;
    if (!get(buf, sh, &name) || !get(buf, sh + 0x18, &off) || !get(buf, sh + 0x20, &size)) return false;
    if (str_off + name >= buf.size()) continue;
    if (std::strcmp(buf.c_str() + str_off + name, ".rocm_kpack_ref") != 0) continue;
    if (off > buf.size() || buf.size() - off < size) return false;
    *marker = buf.substr(off, size);
    return true;
  }
  return false;
}

// What the loader did, from its ROCM_KPACK_DEBUG lines. Per arch-list entry ("trying
// architecture: X") it logs every candidate ("  archive A has architecture T") before asking
// any of them, then one line per candidate asked: "  found kernel: N bytes" or "  kernel not
// found in this archive ...". So the K-th answer line is about the K-th candidate of its block.
// `tried` gets each candidate asked (ARCHIVE@TARGET), `archive`/`target` the one loaded from
// (found) or the first one asked (none held the kernel).
void follow(const std::string& log, std::string* archive, std::string* target, std::string* tried) {
  const std::string entry = "kpack: trying architecture: ", head = "kpack:   archive ",
                    mid = " has architecture ", found = "kpack:   found kernel",
                    missing = "kpack:   kernel not found in this archive";
  std::vector<std::pair<std::string, std::string>> block;
  size_t asked = 0;
  bool loaded = false;
  std::istringstream lines(log);
  std::string line;
  auto ask = [&](bool hit) {
    if (asked >= block.size()) return;  // an answer line without its candidate: leave it out
    const auto& [a, t] = block[asked++];
    if (!tried->empty()) tried->push_back('|');
    *tried += a + "@" + t;
    if (*archive == "-" || hit) {
      *archive = a;
      *target = t;
    }
    loaded = loaded || hit;
  };
  while (std::getline(lines, line) && !loaded) {
    if (line.compare(0, entry.size(), entry) == 0) {
      block.clear();
      asked = 0;
    } else if (line.compare(0, head.size(), head) == 0) {
      size_t at = line.rfind(mid);
      if (at != std::string::npos)
        block.emplace_back(line.substr(head.size(), at - head.size()), line.substr(at + mid.size()));
    } else if (line.compare(0, found.size(), found) == 0) {
      ask(true);
    } else if (line.compare(0, missing.size(), missing) == 0) {
      ask(false);
    }
  }
}

}  // namespace

int main() {
  unsetenv("ROCM_KPACK_PATH");
  unsetenv("ROCM_KPACK_PATH_PREFIX");
  unsetenv("ROCM_KPACK_DISABLE");
  setenv("ROCM_KPACK_DEBUG", "1", 1);
  std::string request;
  while (std::getline(std::cin, request)) {
    std::istringstream fields(request);
    std::string binary, isa, index;
    std::getline(fields, binary, '\t');
    std::getline(fields, isa, '\t');
    std::getline(fields, index, '\t');
    std::string marker;
    if (!read_marker(binary, &marker)) {
      std::cout << "-1\t0\t-\t-\t-\t-" << std::endl;
      continue;
    }
    marker.resize(marker.size() + 64 * 1024, '\0');  // the loader may look up to 64 KiB ahead
    // Capture the loader's debug lines (stderr) for this one call.
    std::fflush(stderr);
    FILE* log = std::tmpfile();
    int saved = dup(2);
    dup2(fileno(log), 2);
    kpack_cache_t cache = nullptr;
    kpack_cache_create(&cache);
    const char* arch_list[] = {isa.c_str()};
    void* code = nullptr;
    size_t size = 0;
    kpack_error_t err = kpack_load_code_object(cache, marker.data(), binary.c_str(),
                                               static_cast<uint32_t>(std::stoul(index)),
                                               arch_list, 1, &code, &size);
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string text;
    std::rewind(log);
    char chunk[4096];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, log)) > 0) text.append(chunk, got);
    std::fclose(log);
    std::string archive = "-", target = "-", tried;
    follow(text, &archive, &target, &tried);
    std::string digest = "-";
    if (err == KPACK_SUCCESS) {
      digest = sha256(static_cast<const uint8_t*>(code), size);
      kpack_free_code_object(code);
    } else {
      size = 0;
    }
    kpack_cache_destroy(cache);
    std::cout << err << '\t' << size << '\t' << digest << '\t' << archive << '\t' << target << '\t'
              << (tried.empty() ? "-" : tried) << std::endl;
  }
  return 0;
}
