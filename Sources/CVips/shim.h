#ifndef TANDEM_CVIPS_SHIM_H
#define TANDEM_CVIPS_SHIM_H
// libvips for Swift. Most libvips operations are variadic (optional arguments as name/value pairs
// ended by NULL), which Swift cannot call: each one used is wrapped here in a small fixed-argument
// function with the options spelled out. Nothing else lives here; the logic is in TandemMedia.
#include <string.h>
#include <vips/vips.h>

/// vips_init once per process (VIPS_INIT's work, as a function), then the process-wide policy:
/// only the JPEG, PNG and HEIF loaders may run (the others, ImageMagick's among them, are never
/// reached by hostile files) and no operation cache (every photo is processed once). 0 on success.
static void tdm_quiet_log(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer data) {
    (void)domain; (void)level; (void)message; (void)data;
}

/// GLib's structured log writer: warnings and lesser messages from libvips dropped, the rest as usual.
static GLogWriterOutput tdm_log_writer(GLogLevelFlags level, const GLogField *fields, gsize n, gpointer data) {
    if ((level & (G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO | G_LOG_LEVEL_DEBUG)) != 0) {
        for (gsize i = 0; i < n; i++) {
            if (strcmp(fields[i].key, "GLIB_DOMAIN") == 0 && fields[i].length < 0 && fields[i].value != NULL
                && strcmp((const char *)fields[i].value, "VIPS") == 0)
                return G_LOG_WRITER_HANDLED;
        }
    }
    return g_log_writer_default(level, fields, n, data);
}

static inline int tdm_init(void) {
    if (vips_init("tandem") != 0) return -1;
    // A damaged file's loader warnings would go to stderr as lines of their own; the failure that
    // follows is reported once, by the caller, with libvips's error text.
    g_log_set_handler("VIPS", (GLogLevelFlags)(G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO), tdm_quiet_log, NULL);
    g_log_set_writer_func(tdm_log_writer, NULL, NULL);
    vips_operation_block_set("VipsForeignLoad", TRUE);
    vips_operation_block_set("VipsForeignLoadJpeg", FALSE);
    vips_operation_block_set("VipsForeignLoadPng", FALSE);
    vips_operation_block_set("VipsForeignLoadHeif", FALSE);
    vips_cache_set_max(0);
    return 0;
}

/// A `width` × `height` thumbnail, scaled to cover the box then centre-cropped, EXIF orientation
/// applied (vips_thumbnail's default), shrink-on-load where the format allows it.
static inline int tdm_thumbnail_source(VipsSource *source, int width, int height, VipsImage **out) {
    return vips_thumbnail_source(source, out, width,
                                 "height", height,
                                 "crop", VIPS_INTERESTING_CENTRE,
                                 "size", VIPS_SIZE_BOTH,
                                 NULL);
}

/// The image header (and lazily its pixels) from a source.
static inline VipsImage *tdm_image_new_from_source(VipsSource *source) {
    return vips_image_new_from_source(source, "", NULL);
}

/// Alpha flattened onto white (a transparent PNG's thumbnail is not black where it was clear).
static inline int tdm_flatten_white(VipsImage *in, VipsImage **out) {
    double white[1] = { 255.0 };
    VipsArrayDouble *background = vips_array_double_new(white, 1);
    int result = vips_flatten(in, out, "background", background, NULL);
    vips_area_unref(VIPS_AREA(background));
    return result;
}

/// A copy that can take new metadata without touching `in`.
static inline int tdm_copy(VipsImage *in, VipsImage **out) {
    return vips_copy(in, out, NULL);
}

/// A JPEG in memory (free with g_free), all metadata stripped.
static inline int tdm_jpegsave_buffer(VipsImage *in, void **buf, size_t *len, int quality) {
    return vips_jpegsave_buffer(in, buf, len, "Q", quality, "strip", TRUE, NULL);
}

/// A PNG in memory (free with g_free), metadata kept (tests build inputs with it).
static inline int tdm_pngsave_buffer(VipsImage *in, void **buf, size_t *len) {
    return vips_pngsave_buffer(in, buf, len, NULL);
}

/// An 8-bit HEVC HEIF to a target; metadata as the image carries it (the caller has replaced it).
static inline int tdm_heifsave_target(VipsImage *in, VipsTarget *target, int quality) {
    return vips_heifsave_target(in, target,
                                "Q", quality,
                                "bitdepth", 8,
                                "compression", VIPS_FOREIGN_HEIF_COMPRESSION_HEVC,
                                NULL);
}

/// Removes every metadata field that can carry where and with what a photo was taken: the EXIF
/// block and the fields libvips parsed out of it ("exif-ifd…"), XMP, IPTC and Photoshop resources.
/// The ICC profile and the orientation stay.
static inline void tdm_remove_metadata(VipsImage *image) {
    gchar **fields = vips_image_get_fields(image);
    for (gchar **f = fields; f != NULL && *f != NULL; f++) {
        if (strncmp(*f, "exif-", 5) == 0 || strcmp(*f, VIPS_META_XMP_NAME) == 0
            || strcmp(*f, VIPS_META_IPTC_NAME) == 0 || strcmp(*f, VIPS_META_PHOTOSHOP_NAME) == 0)
            vips_image_remove(image, *f);
    }
    g_strfreev(fields);
}

// For tests, which build their inputs with libvips: HEIC, and decoding.
static inline int tdm_heifsave_buffer(VipsImage *in, void **buf, size_t *len) {
    return vips_heifsave_buffer(in, buf, len, "Q", 90, "bitdepth", 8, "compression", VIPS_FOREIGN_HEIF_COMPRESSION_HEVC, NULL);
}

static inline VipsImage *tdm_image_new_from_buffer(const void *buf, size_t len) {
    return vips_image_new_from_buffer(buf, len, "", NULL);
}

/// A QR scan's input: the image scaled by `scale` (≤ 1), one 8-bit grey band.
static inline int tdm_grey_for_scan(VipsImage *in, double scale, VipsImage **out) {
    VipsImage *scaled = NULL, *grey = NULL, *band = NULL;
    int rc = 0;
    if (scale < 1.0) rc = vips_resize(in, &scaled, scale, NULL);
    else { scaled = in; g_object_ref(in); }
    if (rc == 0) rc = vips_colourspace(scaled, &grey, VIPS_INTERPRETATION_B_W, NULL);
    if (rc == 0) rc = vips_extract_band(grey, &band, 0, NULL);
    if (rc == 0) rc = vips_cast(band, out, VIPS_FORMAT_UCHAR, NULL);
    if (scaled) g_object_unref(scaled);
    if (grey) g_object_unref(grey);
    if (band) g_object_unref(band);
    return rc;
}

#endif
