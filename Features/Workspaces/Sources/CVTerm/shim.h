#ifndef TERMIND_CVTERM_SHIM_H
#define TERMIND_CVTERM_SHIM_H
// libvterm (0.3.3 with termind's patches, scripts/deps/libvterm.sh), the terminal state
// model of a durable session. Only TerminalScreen imports this module.
#include <vterm.h>

// A screen cell's attributes are C bit-fields; flattened here so Swift reads plain values.
typedef struct {
    unsigned int bold, underline, italic, blink, reverse, strike, font;
} termind_vterm_attrs;

static inline termind_vterm_attrs termind_vterm_cell_attrs(const VTermScreenCell *cell) {
    termind_vterm_attrs a = { cell->attrs.bold, cell->attrs.underline, cell->attrs.italic, cell->attrs.blink,
                              cell->attrs.reverse, cell->attrs.strike, cell->attrs.font };
    return a;
}

// VTERM_COLOR_IS_* are macros.
static inline int termind_vterm_color_is_default_fg(const VTermColor *c) { return VTERM_COLOR_IS_DEFAULT_FG(c); }
static inline int termind_vterm_color_is_default_bg(const VTermColor *c) { return VTERM_COLOR_IS_DEFAULT_BG(c); }
static inline int termind_vterm_color_is_indexed(const VTermColor *c) { return VTERM_COLOR_IS_INDEXED(c); }
#endif
