// The dequantization of GGUF block-quantized weights, for the tests that hold
// it to the `gguf` package's (python/tests/test_gguf_block_types.py): a
// file's tensor or blocks given as bytes, dequantized either by the reference
// (qkv::dequantize_row, what GgufFile::load and load_gguf(exact=True) read)
// or by the active kernel table (QuantizedWeight::dequantize, the weights the
// quantized linear layers multiply by).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "qkv/error.h"
#include "qkv/io/gguf.h"
#include "qkv/quantized_linear.h"

namespace qkv::python {

namespace {

// [rows, cols] blocks at `data` through the kernels: float32 [rows, cols].
Tensor kernel_dequantize(uint32_t ggml_type, int64_t rows, int64_t cols, const void* data,
                         int64_t size, std::shared_ptr<const void> owner) {
  const QuantizedWeight w(quant_format_from_ggml_type(ggml_type), rows, cols, data, size,
                          std::move(owner));
  return w.dequantize();
}

}  // namespace

void bind_gguf_blocks(py::module_& m) {
  // -> float32 numpy array of the tensor's shape (dims reversed).
  m.def(
      "gguf_dequantize",
      [](const std::string& path, const std::string& name, bool kernels) {
        Tensor t;
        {
          py::gil_scoped_release release;
          const io::GgufFile file(path);
          if (!kernels) {
            t = file.load(name);
          } else {
            const io::GgufTensorInfo& info = file.tensor(name);
            const int64_t cols = info.dims.empty() ? 1 : info.dims[0];
            QKV_CHECK(cols > 0 && info.numel() > 0, "gguf_dequantize: tensor \"", name,
                      "\" is empty");
            t = kernel_dequantize(static_cast<uint32_t>(info.type), info.numel() / cols, cols,
                                  info.data.data(), static_cast<int64_t>(info.data.size()),
                                  file.storage())
                    .reshape(info.shape());
          }
        }
        return to_numpy(t);
      },
      py::arg("path"), py::arg("name"), py::arg("kernels") = false);

  // `data`: rows · cols / block blocks of ggml type `ggml_type` -> float32 [rows, cols].
  m.def(
      "dequantize_blocks",
      [](uint32_t ggml_type, const py::bytes& data, int64_t rows, int64_t cols, bool kernels) {
        const std::string_view bytes = data;
        const QuantFormat format = quant_format_from_ggml_type(ggml_type);
        if (kernels)
          return to_numpy(kernel_dequantize(ggml_type, rows, cols, bytes.data(),
                                            static_cast<int64_t>(bytes.size()), nullptr));
        // The reference on a checked copy: QuantizedWeight validates the sizes.
        const QuantizedWeight w(format, rows, cols,
                                std::as_bytes(std::span(bytes.data(), bytes.size())));
        Tensor t = Tensor::empty({rows, cols}, DType::kFloat32);
        for (int64_t r = 0; r < rows; ++r)
          dequantize_row(format, bytes.data() + r * (w.bytes() / rows), t.data<float>() + r * cols,
                         cols);
        return to_numpy(t);
      },
      py::arg("ggml_type"), py::arg("data"), py::arg("rows"), py::arg("cols"),
      py::arg("kernels") = false);
}

}  // namespace qkv::python
