#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes daemon/models/sphere_data.c: DIPY's built-in spheres as C tables.

Usage: /usr/bin/python3 scripts/gen_sphere_data.py > daemon/models/sphere_data.c

The vertex and face figures come from dipy.data.get_sphere(name), so the
daemon samples ODFs on exactly the spheres DIPY users name. Edges are not
stored: daemon/models/sphere.c derives them from the faces as DIPY does.
"""
import sys

import dipy
from dipy.data import get_sphere

SPHERES = ("repulsion724", "repulsion100", "symmetric362")
PER_LINE = 4


def c_float(x):
    text = "%.9g" % x
    if not any(c in text for c in ".e"):
        text += ".0"
    return text + "f"


def c_ident(name):
    return name.replace("-", "_")


def emit_rows(out, rows, fmt):
    for start in range(0, len(rows), PER_LINE):
        chunk = rows[start:start + PER_LINE]
        out.write("\t" + " ".join("{" + ", ".join(fmt(x) for x in row) + "},"
                                  for row in chunk) + "\n")


def emit_sphere(out, name):
    sphere = get_sphere(name)
    ident = c_ident(name)
    vertices = sphere.vertices.tolist()
    faces = sphere.faces.astype(int).tolist()
    out.write(f"static const float {ident}_vertices[{len(vertices)}][3] = {{\n")
    emit_rows(out, vertices, c_float)
    out.write("};\n\n")
    out.write(f"static const int {ident}_faces[{len(faces)}][3] = {{\n")
    emit_rows(out, faces, str)
    out.write("};\n\n")
    return ident, len(vertices), len(faces)


def main():
    out = sys.stdout
    out.write("/* SPDX-License-Identifier: MIT */\n")
    out.write("/*\n")
    out.write(" * GENERATED FILE, do not edit. Vertex and face figures of DIPY's "
              "built-in\n")
    out.write(f" * spheres, taken from DIPY {dipy.__version__} "
              "(dipy.data.get_sphere).\n")
    out.write(" * Regenerate: /usr/bin/python3 scripts/gen_sphere_data.py > "
              "daemon/models/sphere_data.c\n")
    out.write(" */\n")
    out.write("/* Generated tables, kept as the generator writes them: */\n")
    out.write("/* clang-format off */\n")
    out.write('#include <stddef.h>\n\n#include "models/sphere_data.h"\n\n')
    tables = [emit_sphere(out, name) for name in SPHERES]
    out.write("const char *const sphere_builtin_names[] = {\n")
    for name in SPHERES:
        out.write(f'\t"{name}",\n')
    out.write("\tNULL,\n};\n\n")
    out.write("const struct sphere_figure sphere_figures[] = {\n")
    for (ident, nv, nf), name in zip(tables, SPHERES):
        out.write(f'\t{{"{name}", {nv}, {nf}, {ident}_vertices, '
                  f"{ident}_faces}},\n")
    out.write("};\n\n")
    out.write(f"const int sphere_figure_count = {len(SPHERES)};\n")


if __name__ == "__main__":
    main()
