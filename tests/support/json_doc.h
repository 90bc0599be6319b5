// json_doc.h: a JSON document parsed from a tool's output, released at
// scope exit. The whole text must be one document: text after it is an
// error, so concatenated documents fail.
#pragma once

#include <string>

#include <jansson.h>

namespace tpcc_test {

struct JsonDoc {
    explicit JsonDoc(const std::string &text)
    {
        json_error_t e;
        root = json_loads(text.c_str(), 0, &e);
        if (!root)
            error = std::string(e.text) + " at line " + std::to_string(e.line);
    }
    ~JsonDoc()
    {
        if (root)
            json_decref(root);
    }
    JsonDoc(const JsonDoc &) = delete;
    JsonDoc &operator=(const JsonDoc &) = delete;
    json_t *root = nullptr;
    std::string error;
};

}  // namespace tpcc_test
