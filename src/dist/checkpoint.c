/* Distributed checkpoints (include/oar/dist.h): every rank writes the
 * shards it owns as one safetensors file, and rank 0 writes an index of
 * global shapes, dtypes and where each chunk lies; loading reads, for
 * each target shard, the chunks that overlap it, so a checkpoint saved on
 * one mesh loads onto any other, or into one process.
 *
 * A folder holds one checkpoint:
 *   index.json                      {"format": "oar.dist_checkpoint", ...}
 *   shard-<gen>-<rank>.safetensors  the chunks world rank <rank> owns
 * <gen> is a number every rank agrees on at save time (rank 0's clock),
 * so a save over an older checkpoint writes new files beside the old ones
 * and the index, written last by the save protocol, switches from one to
 * the other at once; rank 0 then removes the older generation's files.
 *
 * Who writes a chunk: for a dtensor, the ranks whose coordinate is 0 along
 * every mesh dim where the tensor is replicated (Partial is reduced to
 * Replicate first, one all-reduce); for a plain tensor, rank 0. So every
 * element is written once, and every rank can tell, from the mesh and
 * placements alone, which rank wrote what. */
#include "dist.h"

#include "../core/save.h"
#include "../io/file.h"
#include "../io/json.h"

#include <dirent.h>
#include <errno.h>
#include <oar/autograd.h>
#include <oar/io.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define INDEX "index.json"
#define FORMAT "oar.dist_checkpoint"
#define VERSION 1

/* A chunk: the box [offset, offset + shape) of a tensor's global value. */
typedef struct box {
    int ndim;
    int64_t off[OAR_MAX_DIMS], len[OAR_MAX_DIMS];
} box;

static int64_t box_numel(const box *b) {
    int64_t n = 1;
    for (int i = 0; i < b->ndim; i++) n *= b->len[i];
    return n;
}

/* The box of a dtensor's global value held at mesh coordinates coord (all
 * placements Shard or Replicate). */
static box shard_box(const oar_tensor *t, const oar_mesh *m, const oar_placement *p, const int *coord) {
    box b = {.ndim = t->ndim};
    for (int i = 0; i < t->ndim; i++) b.len[i] = t->shape[i];
    for (int d = 0; d < m->ndim; d++)
        if (p[d].kind == OAR_PLACEMENT_SHARD)
            oari_chunk(t->shape[p[d].dim], m->shape[d], coord[d], &b.off[p[d].dim], &b.len[p[d].dim]);
    return b;
}

/* Whether the rank at coord writes its shard: coordinate 0 along every
 * replicated mesh dim. */
static bool writes(const oar_mesh *m, const oar_placement *p, const int *coord) {
    for (int d = 0; d < m->ndim; d++)
        if (p[d].kind == OAR_PLACEMENT_REPLICATE && coord[d] != 0) return false;
    return true;
}

static int world_rank(void) { return oari_dist_ready() ? oar_dist_rank() : 0; }
static int world_size(void) { return oari_dist_ready() ? oar_dist_world_size() : 1; }

/* One int64 summed over every rank of the world mesh w (v itself in one
 * process, w NULL): agreement on status and on the generation. */
static int world_sum(oar_mesh *w, int64_t *v) { return w ? oari_sum_i64(v, w, 0) : 0; }

static void shard_path(char *buf, size_t size, const char *dir, int64_t gen, int rank) {
    snprintf(buf, size, "%s/shard-%lld-%05d.safetensors", dir, (long long)gen, rank);
}

static const char *shard_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The arguments every entry point checks. */
static int check_args(const char *who, const char *dir, int n, const char *const *names, oar_tensor *const *tensors) {
    if (!dir || !*dir) return oari_error(OAR_ERR_INVALID, "%s: dir is NULL or empty", who);
    if (strlen(dir) > 3800) return oari_error(OAR_ERR_INVALID, "%s: dir is longer than 3800 bytes", who);
    if (n < 0 || (n > 0 && (!names || !tensors)))
        return oari_error(OAR_ERR_INVALID, "%s: n = %d with names %s and tensors %s", who, n, names ? "set" : "NULL",
                          tensors ? "set" : "NULL");
    for (int i = 0; i < n; i++) {
        if (!names[i] || !*names[i]) return oari_error(OAR_ERR_INVALID, "%s: name %d is NULL or empty", who, i);
        if (!tensors[i]) return oari_error(OAR_ERR_INVALID, "%s: tensor %d (\"%s\") is NULL", who, i, names[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return oari_error(OAR_ERR_INVALID, "%s: the name \"%s\" is given twice", who, names[i]);
    }
    return 0;
}

/* ---- save ---------------------------------------------------------------- */

/* The tensor as saved: a dtensor with Partial placements reduced to
 * Replicate (collective over its mesh), else t itself. Owned by the pool. */
static oar_tensor *without_partial(oar_tensor *t) {
    oari_dist_attr *a = oari_dist(t);
    if (!a) return t;
    oar_placement p[OAR_MESH_MAX_DIMS];
    bool partial = false;
    for (int d = 0; d < a->mesh->ndim; d++) {
        p[d] = a->p[d];
        if (p[d].kind == OAR_PLACEMENT_PARTIAL) p[d] = oar_replicate(), partial = true;
    }
    return partial ? oar_reshard(t, a->mesh, p) : t;
}

/* The index entry of one tensor (saved as x): dtype, shape, placements and
 * every chunk with the file of the rank that writes it. */
static cJSON *index_entry(const char *name, oar_tensor *x, const char *dir, int64_t gen) {
    cJSON *o = cJSON_CreateObject(), *shape = cJSON_AddArrayToObject(o, "shape");
    cJSON *chunks = cJSON_AddArrayToObject(o, "chunks");
    bool ok = shape && chunks && cJSON_AddStringToObject(o, "name", name) &&
              cJSON_AddStringToObject(o, "dtype", oar_dtype_name(x->dtype));
    for (int i = 0; ok && i < x->ndim; i++) ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)x->shape[i]));
    oari_dist_attr *a = oari_dist(x);
    int64_t n_pos = a ? a->mesh->size : 1;
    char path[4096], placed[128] = "plain";
    if (a) oar_placements_str(a->mesh, a->p, placed, sizeof placed);
    ok = ok && cJSON_AddStringToObject(o, "placements", placed);
    for (int64_t pos = 0; ok && pos < n_pos; pos++) {
        int coord[OAR_MESH_MAX_DIMS] = {0}, rank = 0;
        box b = {.ndim = x->ndim};
        if (a) {
            oari_mesh_coords(a->mesh, pos, coord);
            if (!writes(a->mesh, a->p, coord)) continue;
            b = shard_box(x, a->mesh, a->p, coord);
            rank = a->mesh->ranks[pos];
        } else {
            for (int i = 0; i < x->ndim; i++) b.len[i] = x->shape[i];
        }
        if (!box_numel(&b) && x->numel) continue; /* an empty chunk of an uneven split */
        cJSON *c = cJSON_CreateObject(), *off = cJSON_AddArrayToObject(c, "offset"),
              *len = cJSON_AddArrayToObject(c, "shape");
        shard_path(path, sizeof path, dir, gen, rank);
        ok = c && off && len && cJSON_AddStringToObject(c, "file", shard_name(path)) &&
             cJSON_AddItemToArray(chunks, c);
        for (int i = 0; ok && i < x->ndim; i++)
            ok = cJSON_AddItemToArray(off, cJSON_CreateNumber((double)b.off[i])) &&
                 cJSON_AddItemToArray(len, cJSON_CreateNumber((double)b.len[i]));
    }
    if (!ok) cJSON_Delete(o), o = NULL;
    return o;
}

/* Removes this folder's shard files of other generations (after the index
 * names the new one). Best effort. */
static void remove_old_shards(const char *dir, int64_t gen) {
    DIR *d = opendir(dir);
    if (!d) return;
    char keep[64], path[4200];
    snprintf(keep, sizeof keep, "shard-%lld-", (long long)gen);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "shard-", 6) || !strncmp(e->d_name, keep, strlen(keep))) continue;
        size_t len = strlen(e->d_name);
        if (len < 12 || strcmp(e->d_name + len - 12, ".safetensors")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

int oar_dist_checkpoint_save(const char *dir, int n, const char *const *names, oar_tensor *const *tensors) {
    const char *who = "oar_dist_checkpoint_save";
    int st = check_args(who, dir, n, names, tensors);
    if (st) return st;
    oari_json_init();
    int me = world_rank();
    /* the generation: rank 0's clock, agreed by a sum (the others add 0) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t gen = me == 0 ? (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 : 0;
    oar_mesh *world = NULL; /* made once for the save's three sums (collective) */
    if (oari_dist_ready() && world_size() > 1 &&
        !(world = oar_mesh_create(1, (int64_t[]){world_size()}, NULL, NULL)))
        return oari_fail_status();
    if ((st = world_sum(world, &gen))) return oar_mesh_release(world), st;
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push();
    int e = oari_make_dirs(dir, 0777);
    if (e) st = oari_error(OAR_ERR_IO, "%s: cannot create the folder %s: %s", who, dir, strerror(e));
    /* every rank takes part in each reshard, in order, before any writes */
    oar_tensor *saved[n > 0 ? n : 1];
    for (int i = 0; i < n; i++) {
        saved[i] = without_partial(tensors[i]);
        if (!saved[i] && !st) st = oari_fail_status();
    }
    /* this rank's chunks, one file */
    const char *mine_names[n > 0 ? n : 1];
    oar_tensor *mine[n > 0 ? n : 1];
    int n_mine = 0;
    for (int i = 0; i < n && !st; i++) {
        oari_dist_attr *a = oari_dist(saved[i]);
        bool write = a ? a->mesh->coord[0] >= 0 && writes(a->mesh, a->p, a->mesh->coord) : me == 0;
        oar_tensor *local = a ? a->local : saved[i];
        if (!write || (!oar_tensor_numel(local) && saved[i]->numel)) continue;
        if (oar_tensor_device(local) != oar_device_cpu()) local = oar_tensor_to(local, oar_device_cpu());
        if (!local) st = oari_fail_status();
        mine_names[n_mine] = names[i];
        mine[n_mine++] = local;
    }
    char path[4096];
    shard_path(path, sizeof path, dir, gen, me);
    if (!st && n_mine) st = oar_safetensors_save(path, n_mine, mine_names, mine);
    /* every rank's status, before the index may name its file */
    int64_t failed = st != 0;
    int agree = world_sum(world, &failed);
    if (!st && agree) st = agree;
    if (!st && failed)
        st = oari_error(OAR_ERR_IO, "%s: %lld rank(s) failed to write their shards to %s; the checkpoint "
                        "there is unchanged", who, (long long)failed, dir);
    if (!st && me == 0) {
        cJSON *root = cJSON_CreateObject(), *list = root ? cJSON_AddArrayToObject(root, "tensors") : NULL;
        bool ok = list && cJSON_AddStringToObject(root, "format", FORMAT) &&
                  cJSON_AddNumberToObject(root, "version", VERSION) &&
                  cJSON_AddNumberToObject(root, "world_size", world_size()) &&
                  cJSON_AddNumberToObject(root, "generation", (double)gen);
        for (int i = 0; ok && i < n; i++) {
            cJSON *e = index_entry(names[i], saved[i], dir, gen);
            ok = e && cJSON_AddItemToArray(list, e);
        }
        char *text = ok ? cJSON_Print(root) : NULL;
        cJSON_Delete(root);
        if (!text) {
            st = oari_nomem("oar_dist_checkpoint_save: the index");
        } else {
            snprintf(path, sizeof path, "%s/" INDEX, dir);
            st = oari_file_save(path, text, strlen(text), who);
            cJSON_free(text);
        }
        if (!st) remove_old_shards(dir, gen);
    }
    /* rank 0's status: every rank returns the same */
    failed = st != 0;
    agree = world_sum(world, &failed);
    if (!st && (agree || failed))
        st = agree ? agree : oari_error(OAR_ERR_IO, "%s: rank 0 could not write %s/" INDEX, who, dir);
    oar_mesh_release(world);
    oar_no_grad_pop();
    oar_pool_pop(pool);
    return st;
}

/* ---- load ---------------------------------------------------------------- */

/* The parsed index of dir, or NULL with the error set. */
static cJSON *read_index(const char *who, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/" INDEX, dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return oari_error(OAR_ERR_IO, "%s: %s: cannot open: %s (not a checkpoint, or its save did not "
                          "finish)", who, path, strerror(errno)), NULL;
    uint64_t size = oari_file_remaining(f);
    if (size == UINT64_MAX || oari_load_check(who, path, "the index", size, size)) {
        if (size == UINT64_MAX) oari_error(OAR_ERR_IO, "%s: %s: cannot tell its size", who, path);
        fclose(f);
        return NULL;
    }
    char *text = oari_malloc((size_t)size + 1);
    bool read_ok = text && fread(text, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    if (!text) return NULL; /* (oari_malloc set the error) */
    if (!read_ok) {
        oari_free(text, (size_t)size + 1);
        return oari_error(OAR_ERR_IO, "%s: %s: read error", who, path), NULL;
    }
    text[size] = 0;
    oari_json_init();
    cJSON *root = cJSON_ParseWithLength(text, (size_t)size);
    oari_free(text, (size_t)size + 1);
    if (!root) {
        if (oari_json_take_oom()) return oari_nomem("oar_dist_checkpoint: the index"), NULL;
        return oari_error(OAR_ERR_IO, "%s: %s: not valid JSON", who, path), NULL;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) || !cJSON_IsNumber(ver)) {
        cJSON_Delete(root);
        return oari_error(OAR_ERR_IO, "%s: %s is not an oar distributed checkpoint index", who, path), NULL;
    }
    double version = ver->valuedouble;
    if (version != VERSION) {
        cJSON_Delete(root);
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: %s has version %g; this oar reads version %d", who, path,
                          version, VERSION), NULL;
    }
    return root;
}

/* An array of exactly ndim non-negative integers into v. */
static bool int_array(const cJSON *a, int ndim, int64_t *v) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != ndim) return false;
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 9.0e15 ||
            e->valuedouble != (double)(int64_t)e->valuedouble)
            return false;
        v[i] = (int64_t)e->valuedouble;
    }
    return true;
}

/* The index entry named name, or NULL. */
static const cJSON *find_entry(const cJSON *root, const char *name) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) return e;
    }
    return NULL;
}

/* Shard files read so far, kept for the other tensors of one load. */
typedef struct file_cache {
    int n;
    char name[64][96];
    oar_tensor_dict *dict[64];
} file_cache;

static void cache_free(file_cache *c) {
    for (int i = 0; i < c->n; i++) oar_tensor_dict_free(c->dict[i]);
    c->n = 0;
}

static oar_tensor_dict *cache_get(const char *who, file_cache *c, const char *dir, const char *file) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->name[i], file)) return c->dict[i];
    if (strchr(file, '/') || strlen(file) >= sizeof c->name[0] || !strncmp(file, "..", 2))
        return oari_error(OAR_ERR_IO, "%s: %s/" INDEX " names a bad shard file \"%s\"", who, dir, file), NULL;
    if (c->n == 64) cache_free(c); /* (reread later if needed) */
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    oar_tensor_dict *d = oar_safetensors_load(path);
    if (!d) return NULL;
    snprintf(c->name[c->n], sizeof c->name[0], "%s", file);
    c->dict[c->n++] = d;
    return d;
}

/* Copies into dst (the box `want` of the global value) the parts of every
 * chunk of entry e that overlap it; the elements copied into *covered. */
static int fill_box(const char *who, const char *dir, const char *name, const cJSON *e, oar_dtype dtype, int ndim,
                    oar_tensor *dst, const box *want, file_cache *cache, int64_t *covered) {
    const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(e, "chunks");
    if (!cJSON_IsArray(chunks))
        return oari_error(OAR_ERR_IO, "%s: %s/" INDEX ": tensor \"%s\" has no chunk list", who, dir, name);
    *covered = 0;
    for (const cJSON *c = chunks->child; c; c = c->next) {
        box have = {.ndim = ndim};
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(c, "file");
        if (!cJSON_IsString(file) || !int_array(cJSON_GetObjectItemCaseSensitive(c, "offset"), ndim, have.off) ||
            !int_array(cJSON_GetObjectItemCaseSensitive(c, "shape"), ndim, have.len))
            return oari_error(OAR_ERR_IO, "%s: %s/" INDEX ": a chunk of tensor \"%s\" lacks its file, offset or "
                              "shape", who, dir, name);
        box part = {.ndim = ndim};
        bool overlap = true;
        for (int i = 0; i < ndim && overlap; i++) {
            int64_t lo = have.off[i] > want->off[i] ? have.off[i] : want->off[i];
            int64_t hi_h = have.off[i] + have.len[i], hi_w = want->off[i] + want->len[i];
            int64_t hi = hi_h < hi_w ? hi_h : hi_w;
            part.off[i] = lo;
            part.len[i] = hi - lo;
            overlap = hi > lo;
        }
        if (!overlap && box_numel(want)) continue;
        oar_tensor_dict *d = cache_get(who, cache, dir, file->valuestring);
        if (!d) return oari_fail_status();
        oar_tensor *src = oar_tensor_dict_get(d, name);
        bool same = src && src->dtype == dtype && src->ndim == ndim;
        for (int i = 0; same && i < ndim; i++) same = src->shape[i] == have.len[i];
        if (!same)
            return oari_error(OAR_ERR_IO, "%s: %s/%s: tensor \"%s\" is %s there, not the chunk the index "
                              "describes (corrupt or mixed checkpoint)", who, dir, file->valuestring, name,
                              src ? "of another dtype or shape" : "missing");
        if (!box_numel(want)) continue;
        oar_tensor *from = src, *to = dst;
        for (int i = 0; i < ndim && from && to; i++) {
            from = oar_slice(from, i, part.off[i] - have.off[i], part.off[i] - have.off[i] + part.len[i], 1);
            to = oar_slice(to, i, part.off[i] - want->off[i], part.off[i] - want->off[i] + part.len[i], 1);
        }
        if (!from || !to || oar_copy_(to, from)) return oari_fail_status();
        *covered += box_numel(&part);
    }
    return 0;
}

/* Checks entry e against a target of dtype and shape; the error names the
 * tensor and both sides. */
static int check_entry(const char *who, const char *dir, const char *name, const cJSON *e, oar_dtype dtype,
                       int ndim, const int64_t *shape) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    int64_t saved[OAR_MAX_DIMS];
    int sn = cJSON_IsArray(sh) ? cJSON_GetArraySize(sh) : -1;
    if (!cJSON_IsString(dt) || sn < 0 || sn > OAR_MAX_DIMS || !int_array(sh, sn, saved))
        return oari_error(OAR_ERR_IO, "%s: %s/" INDEX ": tensor \"%s\" has no valid dtype or shape", who, dir, name);
    char a[200], b[200];
    bool same = sn == ndim;
    for (int i = 0; same && i < ndim; i++) same = saved[i] == shape[i];
    if (!same)
        return oari_error(OAR_ERR_INVALID, "%s: tensor \"%s\" has global shape %s in the checkpoint %s, %s here",
                          who, name, oari_shape_str(a, sn, saved), dir, oari_shape_str(b, ndim, shape));
    if (strcmp(dt->valuestring, oar_dtype_name(dtype)))
        return oari_error(OAR_ERR_INVALID, "%s: tensor \"%s\" is %s in the checkpoint %s, %s here", who, name,
                          dt->valuestring, dir, oar_dtype_name(dtype));
    return 0;
}

/* Loads entry e into t: a dtensor's local shard, or a plain tensor's
 * whole value. */
static int load_one(const char *who, const char *dir, const char *name, const cJSON *e, oar_tensor *t,
                    file_cache *cache) {
    int st = check_entry(who, dir, name, e, t->dtype, t->ndim, t->shape);
    if (st) return st;
    oari_dist_attr *a = oari_dist(t);
    oar_tensor *dst = a ? a->local : t;
    box want = {.ndim = t->ndim};
    for (int i = 0; i < t->ndim; i++) want.len[i] = t->shape[i];
    if (a) {
        for (int d = 0; d < a->mesh->ndim; d++)
            if (a->p[d].kind == OAR_PLACEMENT_PARTIAL)
                return oari_error(OAR_ERR_UNSUPPORTED, "%s: tensor \"%s\" is Partial here; load into Replicate "
                                  "placements and reshard", who, name);
        if (a->mesh->coord[0] < 0) return 0; /* this rank holds none of it */
        want = shard_box(t, a->mesh, a->p, a->mesh->coord);
    }
    /* a shard on a device is filled on the CPU, then copied over */
    oar_tensor *host = oar_tensor_device(dst) == oar_device_cpu() ? dst
                                                                 : oar_empty(dst->dtype, dst->ndim, dst->shape, NULL);
    int64_t covered = 0;
    if (!host) return oari_fail_status();
    if ((st = fill_box(who, dir, name, e, t->dtype, t->ndim, host, &want, cache, &covered))) return st;
    if (covered != box_numel(&want))
        return oari_error(OAR_ERR_IO, "%s: the checkpoint %s covers %lld of the %lld elements of tensor \"%s\" "
                          "this rank needs (incomplete or corrupt index)", who, dir, (long long)covered,
                          (long long)box_numel(&want), name);
    if (host != dst && oar_copy_(dst, host)) return oari_fail_status();
    return 0;
}

int oar_dist_checkpoint_load(const char *dir, int n, const char *const *names, oar_tensor *const *tensors) {
    const char *who = "oar_dist_checkpoint_load";
    int st = check_args(who, dir, n, names, tensors);
    if (st) return st;
    cJSON *root = read_index(who, dir);
    if (!root) return oari_fail_status();
    oar_pool *pool = oar_pool_push();
    oar_no_grad_push(); /* parameters are filled in place */
    file_cache cache = {0};
    for (int i = 0; i < n && !st; i++) {
        const cJSON *e = find_entry(root, names[i]);
        if (!e) st = oari_error(OAR_ERR_INVALID, "%s: the checkpoint %s has no tensor \"%s\"", who, dir, names[i]);
        else st = load_one(who, dir, names[i], e, tensors[i], &cache);
    }
    cache_free(&cache);
    oar_no_grad_pop();
    oar_pool_pop(pool);
    cJSON_Delete(root);
    return st;
}

oar_tensor *oar_dist_checkpoint_read(const char *dir, const char *name) {
    const char *who = "oar_dist_checkpoint_read";
    if (check_args(who, dir, 0, NULL, NULL)) return NULL;
    if (!name || !*name) return oari_error(OAR_ERR_INVALID, "%s: name is NULL or empty", who), NULL;
    cJSON *root = read_index(who, dir);
    if (!root) return NULL;
    const cJSON *e = find_entry(root, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    int64_t shape[OAR_MAX_DIMS];
    int ndim = cJSON_IsArray(sh) ? cJSON_GetArraySize(sh) : -1;
    oar_dtype dtype = OAR_DTYPE_COUNT;
    for (int d = 0; cJSON_IsString(dt) && d < OAR_DTYPE_COUNT; d++)
        if (!strcmp(dt->valuestring, oar_dtype_name((oar_dtype)d))) dtype = (oar_dtype)d;
    oar_tensor *t = NULL;
    oar_pool *pool = oar_pool_push();
    if (!e) {
        oari_error(OAR_ERR_INVALID, "%s: the checkpoint %s has no tensor \"%s\"", who, dir, name);
    } else if (dtype == OAR_DTYPE_COUNT || ndim < 0 || ndim > OAR_MAX_DIMS || !int_array(sh, ndim, shape)) {
        oari_error(OAR_ERR_IO, "%s: %s/" INDEX ": tensor \"%s\" has no valid dtype or shape", who, dir, name);
    } else {
        uint64_t bytes;
        if (!oari_load_shape(who, dir, name, ndim, shape, oar_dtype_size(dtype), UINT64_MAX, &bytes))
            t = oar_zeros(dtype, ndim, shape);
        oar_tensor *const one[1] = {t};
        if (t && oar_dist_checkpoint_load(dir, 1, &name, one)) t = NULL;
    }
    cJSON_Delete(root);
    if (!t) return oar_pool_pop(pool), NULL; /* (frees the half-read tensor) */
    return oari_pool_return(pool, t);
}
