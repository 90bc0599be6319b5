/* hf_json.c: a config.json and the diagnostics pointing into it (see
 * hf_json.h). */
#include "compiler/front/hf_json.h"

#include <stdio.h>

json_t *tp_hf_json_read(const char *path, int *line, int *col, char *err, size_t errlen)
{
    *line = *col = 1;
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        /* jansson gives a position only for a parse error (-1 when the
         * file cannot be opened); its column counts the characters read
         * on the line, 0 when it stopped at the line's start */
        if (jerr.line > 0) {
            *line = jerr.line;
            *col = jerr.column > 0 ? jerr.column : 1;
        }
        snprintf(err, errlen, "cannot read Hugging Face config: %s", jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        snprintf(err, errlen, "a Hugging Face config.json must be a JSON object");
        return NULL;
    }
    return root;
}

tp_diag *tp_hf_json_finding(tp_sources *src, tp_diags *diags, const char *path, int line, int col,
                            tp_diag_level level, const char *check, const char *message)
{
    char unused[512];
    int file = tp_sources_load(src, path, unused, sizeof unused);
    tp_span at = {file, line, col, 0, 0};
    const char *text;
    int len;
    if (file < 0) {
        at = (tp_span){tp_sources_add_unread(src, path), 1, 1, 0, 0};
    } else if (tp_source_line(src, file, line, &text, &len)) {
        int in_line = col - 1 < len ? col - 1 : len;
        at.offset = (int)(text - src->files[file].text) + in_line;
        at.col = in_line + 1;
        at.length = in_line < len;
    } else {
        at = (tp_span){file, 1, 1, 0, 0};
    }
    return tp_diag_add(diags, level, at, check, "%s", message);
}
